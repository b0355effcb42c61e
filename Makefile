# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Bytecode is compiled ahead: where PYTHONDONTWRITEBYTECODE is set, every flud
# command would otherwise compile its modules again (~60 ms per command).
# nodes run with -OO (flud/lean.py): their .opt-2.pyc too
COMPILE := $(PY) -m compileall -q -o 0 -o 2 flud tools

.PHONY: venv demo test test-fast bench stress simulate trust-sim clean man completions netlab

$(STAMP): pyproject.toml setup.py flud/_gf256.c flud/_cdc.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot]' --config-settings editable_mode=compat
	cd $(VENV)/lib/python*/site-packages && ../../../bin/python -m compileall -q -o 2 \
		twisted zope attr attrs constantly incremental psutil typing_extensions.py
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@$(COMPILE)
	$(PY) tools/demo.py $(DEMO_ARGS)

test: $(STAMP)
	@$(COMPILE)
	$(PY) -m pytest tests

test-fast: $(STAMP)
	$(PY) -m pytest tests/unit tests/contract

bench: $(STAMP)
	@$(COMPILE)
	$(PY) tools/bench/run_all.py $(BENCH_ARGS)

# Not part of `make test`: many backups of large files at once on a 10-node
# testnet; bounded by STRESS_RUNS and STRESS_TIME (no run starts after it).
STRESS_RUNS ?= 20
STRESS_TIME ?= 900
stress: $(STAMP)
	@$(COMPILE)
	$(PY) tools/stress.py --runs $(STRESS_RUNS) --time-limit $(STRESS_TIME) $(STRESS_ARGS)

# Lifecycle simulation (tests/sim/): SEEDS histories from seed FROM, real
# client jobs on an in-memory network, invariants checked after every step.
# FAULTS: a comma list of fault kinds, "all" or "none" (default: those the
# pytest run has on); STEPS: steps per history, or DAYS: simulated days per
# history. A failing seed prints the command that replays it.
SEEDS  ?= 100
FROM   ?= 1
STEPS  ?= 60
DAYS   ?=
FAULTS ?=
simulate: $(STAMP)
	$(PY) tools/simulate.py --seeds $(SEEDS) --from $(FROM) --steps $(STEPS) \
		$(if $(DAYS),--days $(DAYS)) $(if $(FAULTS),--faults $(FAULTS)) $(SIM_ARGS)

# Placement and reputation over a simulated year (docs/trust.md): 1,000
# nodes, a Sybil operator with 10% of the ids on one host, flaky nodes.
trust-sim: $(STAMP)
	$(PY) tools/trust_sim.py $(TRUST_SIM_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info

# The man page and the shell completions, made from the parser (flud/cli/completion.py).
man: $(STAMP)
	@mkdir -p man
	$(PY) -m flud completion man > man/flud.1

completions: $(STAMP)
	@mkdir -p completions
	$(PY) -m flud completion bash > completions/flud.bash
	$(PY) -m flud completion zsh > completions/_flud

# The network lab's figures (docs/network-lab.md; root, iproute2, nftables):
# NETLAB_PUBLIC public nodes and NETLAB_NAT NATed sites, a backup behind one
# NAT and a restore from the key alone behind another; the lab is taken
# down at the end.
NETLAB_PUBLIC ?= 50
NETLAB_NAT    ?= cone:2,symmetric:1,double:1
# round trip added between any two hosts (ms): netem where the kernel has
# it, else the lab's user-space forwarder (flud/netlab/delay.py)
NETLAB_RTT    ?= 50
netlab: $(STAMP)
	@$(COMPILE)
	$(PY) tools/netlab_run.py --public $(NETLAB_PUBLIC) --nat $(NETLAB_NAT) --rtt $(NETLAB_RTT) $(NETLAB_ARGS)
