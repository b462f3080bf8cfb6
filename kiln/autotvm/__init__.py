"""Automated schedule optimization (the TVM paper's §5): templates declare knobs in a config
space, tasks bind a template to shapes and a target, tuning records (JSON lines) keep every
measurement, and `apply_history_best` makes compilation use the best config per task.

Example:
    >>> from kiln import autotvm
    >>> task = autotvm.create_task("test.matmul", (64, 64, 64, "float32"))  # doctest: +SKIP
    >>> len(task.config_space) > 1                                          # doctest: +SKIP
    True
    >>> autotvm.XGBTuner(task).tune(200, log_file="tune.jsonl")              # doctest: +SKIP
    >>> with autotvm.apply_history_best("tune.jsonl"):                      # doctest: +SKIP
    ...     lib = kiln.compile(mod, params=params)
"""
from . import templates  # noqa: F401  (registers the x86 and GPU operator templates)
from .device_runner import DeviceRunner
from .extract import extract_tasks
from .measure import (BuildResult, LocalBuilder, LocalRunner, MeasureBatch, MeasureOption,
                      create_measure_batch, measure_option)
from .model_select import TaskChoice, select_in_model
from .record import (RECORD_VERSION, STATUSES, ApplyHistoryBest, MeasureInput, MeasureResult,
                     RecordWriter, apply_history_best, best_by_task, load_records,
                     measured_configs)
from .space import ConfigEntity, ConfigSpace, FallbackConfig
from .task import (ApplyFixedConfigs, DispatchContext, Task, compute_flop, create_task,
                   get_config, registered_templates, task_key, template)
from .tune_model import tune_model, tune_tasks
from .tuner import GATuner, GridSearchTuner, RandomTuner, Tuner, XGBTuner

__all__ = [
    "apply_history_best", "ApplyFixedConfigs", "ApplyHistoryBest", "best_by_task",
    "BuildResult", "compute_flop", "ConfigEntity", "ConfigSpace", "create_measure_batch",
    "create_task", "DeviceRunner", "DispatchContext", "extract_tasks", "FallbackConfig", "GATuner",
    "get_config", "GridSearchTuner", "load_records", "LocalBuilder", "LocalRunner",
    "measure_option", "MeasureBatch", "measured_configs", "MeasureInput", "MeasureOption",
    "MeasureResult", "RandomTuner", "RECORD_VERSION", "RecordWriter", "registered_templates",
    "select_in_model", "STATUSES", "Task", "TaskChoice", "task_key", "template", "tune_model",
    "tune_tasks", "Tuner", "XGBTuner",
]
