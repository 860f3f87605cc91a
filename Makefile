# The two commands a newcomer runs: `make demo` (the main job on the local lab) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup system-deps control-plane demo plan test unit lint clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[lab,deploy,dev]'
	touch $@

setup: $(BIN)/.installed

system-deps:
	./scripts/install-system-deps.sh

# The lab's real control plane: kube-apiserver, kube-controller-manager, kube-scheduler and kubeadm built from the
# k8s.io/kubernetes Go module (minutes the first time, then cached by version) and etcd 3.6 from go.etcd.io/etcd; also promtool for
# the alert-rule tests, unpacked alone from Debian's prometheus package (installing it would start a server).
# Also what the lab's NVIDIA packages carry: NVIDIA's container toolkit binaries (nvidia-ctk, ...) built from
# github.com/NVIDIA/nvidia-container-toolkit, and the mock libnvidia-ml.so.1 / libcuda.so.1 (src/gpuready/lab/silicon).
# As root, the lab's Debian base roots too (debootstrap of bookworm, trixie and sid, side by side with the Go builds:
# mostly download and disk, so a cold machine gets them while it compiles instead of at the first lab's start).
# Then, as root, what the lab's hosts get (the kubelet, kube-proxy, crictl, NVIDIA's add-on images and the CUDA
# images): CPU-bound builds done before the tests, not beside the tests that need no lab host.
control-plane: setup system-deps
	$(BIN)/python -m gpuready.lab.cluster.binaries

plan: setup
	$(BIN)/gpuready plan inventory/example.py

demo: setup system-deps control-plane
	./scripts/demo.sh

# actionlint checks the GitHub workflows (.github/workflows); built once from the Go module proxy into the venv.
ACTIONLINT_VERSION := v1.7.12
$(BIN)/actionlint: | setup
	GOBIN=$(abspath $(BIN)) go install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

lint: setup $(BIN)/actionlint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/actionlint

# The lab tests and the others as two pytest runs side by side (scripts/run_tests.py says why); `$(BIN)/pytest`
# runs them all in one, one after the other.
test: setup system-deps control-plane lint
	$(BIN)/python scripts/run_tests.py

# The fast run: no root, no control plane, no lab hosts (tests/conftest.py marks the tests that need the cluster).
unit: setup
	$(BIN)/pytest -m "not cluster and not lab"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache reports
