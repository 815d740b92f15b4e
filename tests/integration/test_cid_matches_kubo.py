"""Acceptance: the CID `cairn cid` computes equals the CID a real Kubo returns for
`ipfs dag put --input-codec dag-json --store-codec dag-cbor --hash blake3`, for varied objects."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest

from node.faces.cli.main import main as cairn
from tests.unit.model_samples import samples

SAMPLES = samples()


def test_there_are_enough_varied_samples() -> None:
    assert len(SAMPLES) >= 40
    kinds = {
        kind
        for _, text in SAMPLES
        for kind in ("sde_0", "rde_0", "mbe_0", "ex_0", "dt_0", "cx_0", "pl_0")
        if f'"{kind}"' in text
    }
    assert kinds == {"sde_0", "rde_0", "mbe_0", "ex_0", "dt_0", "cx_0", "pl_0"}


def _cairn_cid(path: Path) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cairn(["cid", str(path)]) == 0
    return out.getvalue().strip()


@pytest.fixture(scope="module")
def kubo_repo(tmp_path_factory: pytest.TempPathFactory, kubo_binary: Path) -> dict[str, str]:
    """An offline Kubo repo: `ipfs dag put` works on it without a daemon, exactly as a user would type it."""
    repo = tmp_path_factory.mktemp("kubo-cli")
    env = {"IPFS_PATH": str(repo), "IPFS_TELEMETRY": "off", "PATH": "/usr/bin:/bin"}
    subprocess.run([str(kubo_binary), "init", "--profile=test"], env=env, check=True, capture_output=True)
    return env


@pytest.mark.parametrize("name,text", SAMPLES, ids=[n for n, _ in SAMPLES])
def test_cairn_cid_equals_kubo_dag_put(
    name: str, text: str, tmp_path: Path, kubo_binary: Path, kubo_repo: dict[str, str]
) -> None:
    path = tmp_path / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    ours = _cairn_cid(path)
    theirs = (
        subprocess.run(
            [
                str(kubo_binary),
                "dag",
                "put",
                "--input-codec",
                "dag-json",
                "--store-codec",
                "dag-cbor",
                "--hash",
                "blake3",
            ],
            input=text.encode(),
            env=kubo_repo,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    assert ours == theirs, f"{name}: cairn {ours} != kubo {theirs}"


async def test_node_stores_what_kubo_computes(kubo_client) -> None:  # type: ignore[no-untyped-def]
    """The same through the RPC API of a running daemon, and the bytes round-trip."""
    from node.domain.model import cid_str, dagjson, encode

    for name, text in SAMPLES[:10]:
        cid = await kubo_client.dag_put(text.encode(), input_codec="dag-json")
        data = await kubo_client.block_get(cid)
        assert data == encode(dagjson.loads(text)), name
        assert cid_str(cid) == _cairn_cid_text(text)


def _cairn_cid_text(text: str) -> str:
    from node.domain.model import cid_str, dagjson, encode
    from node.domain.model.cid import cid_for

    return cid_str(cid_for(encode(dagjson.loads(text)), "dag-cbor"))
