"""Node identity and settings precedence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from config import iter_fields, load_settings
from node.errors import ConfigError
from node.home import Home
from node.identity import Identity, public_key_from_did


def test_peer_id_matches_py_libp2p() -> None:
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    for seed in (bytes(32), bytes(range(32)), b"\xff" * 32):
        ours = Identity(Ed25519PrivateKey.from_private_bytes(seed))
        theirs = ID.from_pubkey(create_new_key_pair(seed).public_key).to_base58()
        assert ours.peer_id == theirs


def test_node_key_is_a_did_key_that_verifies_signatures(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.init()
    ident = home.identity()
    assert re.fullmatch(r"did:key:z6Mk[1-9A-HJ-NP-Za-km-z]+", ident.node_key)
    pub = public_key_from_did(ident.node_key)
    pub.verify(ident.sign(b"msg"), b"msg")  # raises if the key does not match
    with pytest.raises(ConfigError):
        public_key_from_did("did:key:zNotAKey")


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[api]\nport = 1111\nhost = "127.0.0.2"\n[log]\nlevel = "warning"\n')
    s = load_settings(tmp_path, env={})
    assert (s.api.port, s.api.host, s.log.level, s.ipfs.timeout) == (1111, "127.0.0.2", "warning", 30.0)
    s = load_settings(tmp_path, env={"CAIRN_API_PORT": "2222", "CAIRN_IPFS_BOOTSTRAP": "/ip4/1.2.3.4/tcp/1,/ip4/5.6.7.8/tcp/2"})
    assert s.api.port == 2222 and s.ipfs.bootstrap == ["/ip4/1.2.3.4/tcp/1", "/ip4/5.6.7.8/tcp/2"]
    s = load_settings(tmp_path, env={"CAIRN_API_PORT": "2222"}, overrides={"api.port": 3333, "api.host": None})
    assert s.api.port == 3333 and s.api.host == "127.0.0.2"


@pytest.mark.parametrize(
    "toml,env,needle",
    [
        ("[api]\nprot = 1\n", {}, "unknown setting api.prot"),
        ("[nope]\n", {}, "unknown section [nope]"),
        ("[api]\nport = 'x'\n", {}, "api.port must be int"),
        ("not toml [", {}, "not valid TOML"),
        ("", {"CAIRN_API_PORT": "abc"}, "environment CAIRN_API_PORT: api.port must be int"),
        ("", {"CAIRN_API_PORT": "70000"}, "port number"),
        ("", {"CAIRN_LOG_LEVEL": "loud"}, "log.level"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, toml: str, env: dict[str, str], needle: str) -> None:
    (tmp_path / "config.toml").write_text(toml)
    with pytest.raises(ConfigError) as e:
        load_settings(tmp_path, env=env)
    assert needle in e.value.message


def test_every_setting_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    for key, default, _, _ in iter_fields():
        assert f"`{key}`" in doc, key
        env = "CAIRN_" + key.replace(".", "_").upper()
        assert f"`{env}`" in doc, env
