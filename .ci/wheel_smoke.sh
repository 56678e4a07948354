#!/usr/bin/env bash
# Wheel smoke test: build the wheel, install it WITHOUT extras into a clean virtual environment, and
# run every core command from an EMPTY directory outside the repository (no scenarios/, no examples/:
# everything the commands read must come from the installed package). Each step must exit 0; the
# optional integrations must refuse with a message naming their extra. The first failing step stops
# the script with its name and the tail of its output.
#
#   .ci/wheel_smoke.sh              # from anywhere; PYTHON=python3.11 to pick the interpreter
#   KEEP=1 .ci/wheel_smoke.sh       # keep the temporary directory (printed) for inspection
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
if [ "${KEEP:-0}" = "1" ]; then
  echo "wheel smoke: keeping $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
unset PYTHONPATH  # the installed wheel only, never the source tree
LOG="$WORK/step.log"
START=$SECONDS

fail() {
  echo "wheel smoke: FAILED at step: $1" >&2
  [ -f "$LOG" ] && { echo "---- last output of that step ----" >&2; tail -n 40 "$LOG" >&2; }
  exit 1
}

# step NAME COMMAND...: must exit 0
step() {
  local name="$1"; shift
  local t0=$SECONDS
  "$@" >"$LOG" 2>&1 || fail "$name (exit status $?)"
  echo "wheel smoke: ok   $name ($((SECONDS - t0)) s)"
}

# refuses NAME EXTRA COMMAND...: an optional integration without its extra must fail cleanly,
# naming the extra ([ray], [hf], ...), with no traceback
refuses() {
  local name="$1" extra="$2"; shift 2
  local t0=$SECONDS
  if "$@" >"$LOG" 2>&1; then fail "$name (expected a refusal naming $extra, got exit 0)"; fi
  grep -qF -- "$extra" "$LOG" || fail "$name (the refusal does not name $extra)"
  if grep -q "Traceback" "$LOG"; then fail "$name (a traceback instead of a refusal)"; fi
  echo "wheel smoke: ok   $name refused, naming $extra ($((SECONDS - t0)) s)"
}

# -- build and install ---------------------------------------------------------------------------
# built from a copy of the checkout's files (tracked and new, not ignored): no stale build/ output
# of an earlier build can slip into the wheel, and nothing is written into the checkout
SRC="$REPO"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  SRC="$WORK/src"
  mkdir "$SRC"
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh \
     | tar --null -T - -cf -) | tar -xf - -C "$SRC" || fail "copy the checkout"
fi
cd "$SRC"
step "build the wheel (pip wheel --no-deps)" "$PYTHON" -m pip wheel --no-deps -q -w "$WORK/dist" .
WHEEL="$(ls "$WORK"/dist/async_rl_sandbox-*.whl)"
step "create a clean virtual environment" "$PYTHON" -m venv "$WORK/venv"
VENV="$WORK/venv/bin"
step "install the wheel without extras" "$VENV/python" -m pip install -q -c "$REPO/constraints-cpu.txt" "$WHEEL"

mkdir "$WORK/empty"
cd "$WORK/empty"
export PATH="$VENV:$PATH"
step "the installed package is the one imported, with no extra" "$VENV/python" -c "
import importlib.util as u, pathlib, sandbox, sys
where = pathlib.Path(sandbox.__file__).resolve()
assert pathlib.Path(sys.prefix).resolve() in where.parents, f'sandbox imported from {where}, not the venv'
extras = [m for m in ('ray', 'transformers', 'trl', 'tensorboard', 'wandb', 'hydra', 'omegaconf') if u.find_spec(m)]
assert not extras, f'extras installed: {extras}'
print(where)"
[ -z "$(ls -A "$WORK/empty")" ] || fail "the working directory is not empty"

# -- the README's main job, and the other core commands -------------------------------------------
step "sandbox --version" sandbox --version
step "sandbox run (default scenario: the shipped quickstart)" sandbox run -q
step "sandbox report on the run" sandbox report runs/quickstart
step "sandbox scenario on a shipped name" sandbox scenario max_lag
step "sandbox list" sandbox list
step "sandbox export --list" sandbox export --list
# the README's example per framework (paths under scenarios/ resolve to the shipped copies here)
step "sandbox export -f verl" sandbox export scenarios/lm_partial_rollouts.toml --variant partial -f verl --lr 1e-6 --out promote/verl
step "sandbox export -f verl-vcpo" sandbox export scenarios/lm_mission.toml --variant vcpo -f verl-vcpo --allow-partial --out promote/verl-vcpo
step "sandbox export -f trl" sandbox export scenarios/quickstart.toml --variant sync -f trl --lr 1e-6 --out promote/trl
step "sandbox export -f openrlhf" sandbox export scenarios/lm_mission.toml --variant sync -f openrlhf --lr 1e-6 --out promote/openrlhf
step "sandbox export -f areal" sandbox export scenarios/quickstart.toml --variant async -f areal --allow-partial --out promote/areal
step "sandbox export -f prime-rl" sandbox export scenarios/max_lag_drop.toml -f prime-rl --allow-partial --out promote/prime-rl
step "sandbox export from the run directory" sandbox export runs/quickstart --variant async -f verl-vcpo --out promote/from-run
step "sandbox claims --help" sandbox claims --help
step "sandbox claims (quick, one claim: throughput)" sandbox claims --quick --only throughput --out claims
step "sandbox check (one check, quick: straggler_cost)" sandbox check straggler_cost --quick
step "sandbox demo (stragglers, quick)" sandbox demo stragglers --quick --out demos
step "sandbox plan on a shipped scenario" sandbox plan scenarios/quickstart.toml --workers 4,8,16 --k-max 0,1,2,4
step "sandbox sweep on a shipped sweep (dry run)" sandbox sweep sweeps/lag_lr_quadratic --dry-run

# -- the optional integrations refuse by naming their extra ---------------------------------------
refuses "sandbox sweep --backend ray" "[ray]" sandbox sweep sweeps/lag_lr_quadratic --backend ray --set run.steps=2 --out sweep-ray
refuses "run.writers = tensorboard" "tensorboard" sandbox run sync --set 'run.writers=["tensorboard"]' --set run.steps=2 --out tb
refuses "task.model.backend = hf" "[hf]" sandbox run lm_mission_hf --set run.steps=1 --out hf
refuses "import sandbox.integrations.trl" "[trl]" "$VENV/python" -c "
import sys
try:
    import sandbox.integrations.trl
except ImportError as exc:
    sys.exit(f'error: {exc}')"

echo "wheel smoke: all steps passed in $((SECONDS - START)) s ($(basename "$WHEEL"))"
