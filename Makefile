# Quick start: `make demo` and `make test` each do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo -n)

.PHONY: demo test bench clean zoo

# Debian packages: Graphviz draws graphs (kiln inspect --format png, kiln.viz); PoCL is an
# OpenCL driver that runs target="opencl" kernels on the CPU; the aarch64 cross tool-chain links
# models compiled for 64-bit ARM and user-mode QEMU runs them here. kiln runs without any.
APT_PACKAGES := $(if $(shell command -v dot),,graphviz) \
                $(if $(wildcard /etc/OpenCL/vendors/pocl.icd),,pocl-opencl-icd ocl-icd-libopencl1) \
                $(if $(shell command -v aarch64-linux-gnu-gcc),,gcc-aarch64-linux-gnu libc6-dev-arm64-cross) \
                $(if $(shell command -v qemu-aarch64),,qemu-user)

# torchvision and timm (and pillow, which torchvision imports) for the model zoo
# (kiln.testing.zoo, bench/zoo.py) go into a folder of their own: the registry's torchvision is
# a CUDA build that cannot import beside the CPU torch, and transformers refuses every model once
# it finds that torchvision on the path.
ZOO_PACKAGES := torchvision==0.28.0 timm==1.0.31 pillow==13.0.0
ZOO_STAMP := $(VENV)/zoo/.installed

$(STAMP): pyproject.toml Makefile
	$(if $(strip $(APT_PACKAGES)),($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(APT_PACKAGES)) \
	  || echo "warning: could not install $(strip $(APT_PACKAGES)) (kiln selfcheck says what needs them)")
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,gpu,cluster]"
	touch $(STAMP)

# Without them the model-zoo tests skip (and `make test` tries again).
zoo: $(ZOO_STAMP)
$(ZOO_STAMP): Makefile | $(STAMP)
	($(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/zoo $(ZOO_PACKAGES) \
	  && touch $(ZOO_STAMP)) \
	  || echo "warning: could not install $(ZOO_PACKAGES) (the model-zoo tests skip)"

# Byte-code compiled once here: the environment may forbid Python to write it (as
# PYTHONDONTWRITEBYTECODE does), and every kiln process (build workers too) would recompile.
demo: $(STAMP)
	$(PY) -m compileall -q kiln
	$(PY) bench/demo.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/gemm.py --sizes 512 1024 --demo

# Tests run in one worker process per core (pytest-xdist; tests sharing an expensive fixture
# stay on one worker through --dist loadgroup); the few that assert on measured speed run
# after them, alone, since a neighbour's work would skew what they measure.
test: $(STAMP) $(ZOO_STAMP)
	$(PY) -m compileall -q kiln
	$(PY) -m pytest tests -n auto --dist loadgroup -m "not timing"
	$(PY) -m pytest tests -m timing

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) -m compileall -q kiln
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/gemm.py
	$(PY) bench/int8_gemm.py
	$(PY) bench/vdla_roofline.py --png bench-vdla-roofline.png
	$(PY) bench/vdla_resnet.py --png bench-vdla-resnet.png --json bench-vdla-resnet.json
	$(PY) bench/compile_time.py
	$(PY) bench/torch_fallback.py
	$(PY) bench/models.py --json bench-models.json
	$(PY) bench/ops.py --json bench-ops.json
	$(PY) bench/breadth.py --json bench-breadth.json
	$(PY) bench/quant.py --json bench-quant.json
	$(PY) bench/quantize_agreement.py
	$(PY) bench/quant_pt2e.py --json bench-quant-pt2e.json
	$(PY) bench/bitserial.py

clean:
	rm -rf $(VENV) build *.egg-info
