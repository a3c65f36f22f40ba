#!/usr/bin/env bash
# Builds every fuzz target and runs each for FUZZ_SECONDS (default 60),
# FUZZ_PARALLEL (default 2) at a time, from the committed corpus. Fails when
# any target crashes (a panic, a failed check, a hang of over 10 s on one
# input); the input is then in fuzz/artifacts/<target>/. Installs the nightly
# toolchain and cargo-fuzz when they are missing.
#
# Targets are built without a sanitizer: dockhand and the code it fuzzes are
# safe Rust, so AddressSanitizer finds little here and doubles the build;
# debug assertions are on, so integer overflows fail too.
#
# New inputs fuzzing finds go to a scratch directory, not the committed
# corpus; to keep them, see the README's fuzzing section.
set -euo pipefail
cd "$(dirname "$0")"

export CARGO_TERM_COLOR=never
seconds=${FUZZ_SECONDS:-60}
parallel=${FUZZ_PARALLEL:-2}

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain" >&2
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

# The project's lock file pins what is fuzzed, so the two never drift apart;
# cargo adds what only fuzzing needs (libfuzzer-sys) to the copy.
cp ../Cargo.lock Cargo.lock
flags=(--sanitizer none --release --debug-assertions)
cargo +nightly fuzz build "${flags[@]}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Runs one target; its output goes to a log that is shown when it fails.
fuzz_one() {
    local target=$1
    mkdir -p "$scratch/$target" "artifacts/$target"
    # TMPDIR: what a target writes to its temporary folder (the
    # request_head target's routes file) goes when the run ends.
    if TMPDIR="$scratch" cargo +nightly fuzz run "${flags[@]}" "$target" "$scratch/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="artifacts/$target/" >"$scratch/$target.log" 2>&1; then
        echo "fuzz: $target: no crash in ${seconds}s ($(grep -o 'Done [0-9]* runs' "$scratch/$target.log"))"
    else
        echo "fuzz: $target FAILED:" >&2
        grep -E -A3 'panicked at|ERROR: libFuzzer|Test unit written' "$scratch/$target.log" >&2 ||
            tail -n 40 "$scratch/$target.log" >&2
        echo "fuzz: replay with: cd fuzz && cargo +nightly fuzz run ${flags[*]} $target artifacts/$target/<file>" >&2
        return 1
    fi
}

failed=0
running=0
for target in $(cargo +nightly fuzz list); do
    fuzz_one "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$parallel" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
exit "$failed"
