"""Targets that tests pin.

Schedule heuristics size tiles by the target's vector registers, and the tests of those that
only inspect a choice or a lowered loop nest state AVX-512's figures (the ISA they were
measured on). They pin AVX512 (the `avx512` fixture of conftest.py) so they hold on any host;
tests that run the code use the host and the `host_lanes` fixture instead.
"""
AVX512 = "llvm -mcpu=skylake-avx512"
