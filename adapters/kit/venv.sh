# Sourced (bash) with ADAPTER_DIR set to an adapter's directory (one with a
# requirements.txt): sets ACKGAP_ADAPTER_REQUIREMENTS and ACKGAP_ADAPTER_VENV,
# the venv the adapter runs in. Its path is $ACKGAP_VENV_DIR/venv-NAME-HASH
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/ackgap), HASH the first 16 hex of
# the sha256 of requirements.txt, so that changing a pin makes a new venv and
# an old one is never reused by mistake. Used by adapters/kit/python/run-venv
# and ci/install-adapters.
ACKGAP_ADAPTER_REQUIREMENTS="$ADAPTER_DIR/requirements.txt"
if command -v sha256sum >/dev/null 2>&1; then
    _ackgap_hash="$(sha256sum "$ACKGAP_ADAPTER_REQUIREMENTS" | cut -c1-16)"
else
    _ackgap_hash="$(shasum -a 256 "$ACKGAP_ADAPTER_REQUIREMENTS" | cut -c1-16)"
fi
ACKGAP_ADAPTER_VENV="${ACKGAP_VENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ackgap}/venv-$(basename "$ADAPTER_DIR")-$_ackgap_hash"
unset _ackgap_hash
