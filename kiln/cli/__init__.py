"""The `kiln` command line (installed as the `kiln` console script; also `python -m kiln.cli`).

Commands live one per module (compile_cmd, run_cmd, tune_cmd, inspect_cmd, profile_cmd,
selfcheck), listed in main.COMMANDS; errors.CLIError is how a command reports a user error, and
common holds what several commands share (loading a model file, parsing --input-shape).

Example:
    >>> from kiln.cli.main import main
    >>> main(["compile", "model.onnx", "-o", "model.so"])     # doctest: +SKIP
    0
"""
