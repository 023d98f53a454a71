# Sourced (bash) by adapters/bullmq/run and ci/install-adapters: sets
# ACKGAP_BULLMQ_REQUIREMENTS and ACKGAP_BULLMQ_VENV, the venv the adapter runs
# in. Its path is $ACKGAP_VENV if set, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/ackgap/venv-<first 16 hex of the sha256 of
# requirements.txt>, so that changing a pin makes a new venv and an old one is
# never reused by mistake.
ACKGAP_BULLMQ_REQUIREMENTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/requirements.txt"
if command -v sha256sum >/dev/null 2>&1; then
    _ackgap_hash="$(sha256sum "$ACKGAP_BULLMQ_REQUIREMENTS" | cut -c1-16)"
else
    _ackgap_hash="$(shasum -a 256 "$ACKGAP_BULLMQ_REQUIREMENTS" | cut -c1-16)"
fi
ACKGAP_BULLMQ_VENV="${ACKGAP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ackgap/venv-$_ackgap_hash}"
unset _ackgap_hash
