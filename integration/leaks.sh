#!/usr/bin/env bash
# The leak scenario at full length: 1,000 recreate cycles of a labelled
# container while dockhand runs (CI runs a short count of the same test).
#
#   integration/leaks.sh          # 1,000 cycles
#   integration/leaks.sh 200      # another count
#
# Starts or finds an engine and builds the images as integration/run.sh does;
# the figures (levels at start, after the warm-up and at the end, and the
# time taken) are printed at the end. On a vfs-backed engine a cycle takes
# under a second (1,000 took 12 minutes), more beside other tests.
set -euo pipefail
cd "$(dirname "$0")/.."
DOCKHAND_LEAK_CYCLES=${1:-1000} exec integration/run.sh \
    recreate_cycles_leave_memory_threads_and_descriptors_at_their_level
