"""The Kubo RPC secret settings: ``ipfs.api_auth`` for an external Kubo and the client's header.

Kubo itself is the oracle of the header in tests/integration/test_kubo_managed.py
(test_client_sends_each_kind_of_kubo_secret); here: refusals are one line and never echo the secret."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config import SettingsError, load_settings
from node.adapters.ipfs.rpc_transport import auth_header
from node.support.errors import ConfigError

TOKEN = st.text(string.ascii_letters + string.digits + "-_.~+/", min_size=12, max_size=64)
EXTERNAL = {"CAIRN_IPFS_API": "http://127.0.0.1:5001"}


@settings(max_examples=50, deadline=None)
@given(token=TOKEN)
def test_valid_secrets_load_for_an_external_kubo(tmp_path_factory: pytest.TempPathFactory, token: str) -> None:
    home = tmp_path_factory.mktemp("h")
    for secret in (f"bearer:{token}", f"basic:user:{token}", token):
        loaded = load_settings(home, env={**EXTERNAL, "CAIRN_IPFS_API_AUTH": secret})
        assert loaded.ipfs.api_auth == secret


@settings(max_examples=50, deadline=None)
@given(token=TOKEN, kind=st.sampled_from(["token:", "digest:", "bearer:", "basic:"]))
def test_refusals_name_the_setting_and_never_echo_the_secret(
    tmp_path_factory: pytest.TempPathFactory, token: str, kind: str
) -> None:
    home = tmp_path_factory.mktemp("h")
    # A managed Kubo makes its own secret: a configured one is a mistake. An unknown kind or an empty value too.
    cases = [({"CAIRN_IPFS_API_AUTH": f"bearer:{token}"}, token), ({**EXTERNAL, "CAIRN_IPFS_API_AUTH": kind}, None)]
    if kind in ("token:", "digest:"):
        cases.append(({**EXTERNAL, "CAIRN_IPFS_API_AUTH": f"{kind}{token}"}, token))
    for env, secret in cases:
        with pytest.raises(SettingsError) as info:
            load_settings(home, env=env)
        message = str(info.value)
        assert "ipfs.api_auth" in message and "CAIRN_IPFS_API_AUTH" in message and "\n" not in message
        assert secret is None or secret not in message


def test_header_forms() -> None:
    assert auth_header("bearer:abc") == auth_header("abc") == "Bearer abc"
    assert auth_header("basic:alice:pa55") == auth_header("basic:YWxpY2U6cGE1NQ==") == "Basic YWxpY2U6cGE1NQ=="
    for bad in ("digest:x", "bearer:", "basic:"):
        with pytest.raises(ConfigError):
            auth_header(bad)


def test_no_secret_by_default(tmp_path: Path) -> None:
    assert load_settings(tmp_path, env={}).ipfs.api_auth == ""  # default: no secret for an external Kubo
