#!/usr/bin/env bash
# A short, read-only check of the NVML collector on a machine with NVIDIA GPUs: builds slicemeter and
# prints the inventory and one window per held slice as JSON, sending nothing. It reads through NVML
# only: it changes no GPU setting and never touches MIG mode.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi is not on PATH; NVML may still load"
cargo build --release --quiet
RUST_LOG=${RUST_LOG:-info} ./target/release/slicemeter collect --source nvml --once --dry-run \
  --window "${WINDOW:-10s}" --sample-interval "${SAMPLE_INTERVAL:-1s}" --node "$(hostname)"
