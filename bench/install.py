"""What `pip install -e '.[engine]'` installs on a plain machine: wall time, size, and whether torch or any
nvidia package comes with it. Not a test.

Each checkout is installed into a fresh virtual environment in a temporary directory, with NO pip
configuration (PIP_CONFIG_FILE=/dev/null and every other PIP_* variable cleared: a developer machine's pip
may point at a local index or hold a CPU-only torch constraint, which a plain machine does not have) and no
pip cache (every wheel is downloaded from PyPI, as on a first install). A checkout is a directory, or a git
commit of this repository (`--ref`, exported with `git archive`).

- **install** (the default): the real install; its wall time, the size of site-packages (`du`) and of the
  checkout's kb_bridge (where an editable install leaves the package and its model), the packages.
- **--dry-run**: `pip install --dry-run --ignore-installed --report FILE` lists what would be installed
  without installing it, for a checkout whose real install is too big to be worth making (the CUDA build of
  torch and its nvidia packages, several GB); the size is the sum of the wheels' download sizes (a HEAD
  request per file), which is LESS than their installed size (wheels are compressed).

    python bench/install.py                         # this checkout, installed
    python bench/install.py --ref d125999 --dry-run  # an earlier commit, listed only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from common import REPO, machine, progress, write_result

HEAVY = ("torch", "nvidia-", "triton")


def plain_environment() -> dict[str, str]:
    """This process's environment without any pip configuration."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VIRTUAL_ENV", None)
    return env


def checkout(args: argparse.Namespace, workdir: Path) -> Path:
    if args.ref is None:
        return args.checkout.resolve()
    source = workdir / "source"
    source.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", args.ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    return source


def heavy(names: list[str]) -> list[str]:
    return sorted(name for name in names if name.lower().startswith(HEAVY))


def du_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def largest_folders(site: Path, count: int = 15) -> dict[str, int]:
    """The biggest entries of site-packages (a package's code and its .libs folder count apart)."""
    sizes = {entry.name: du_bytes(entry) for entry in site.iterdir() if not entry.name.endswith(".dist-info")}
    return dict(sorted(sizes.items(), key=lambda item: -item[1])[:count])


def download_size(url: str, session: requests.Session) -> int:
    response = session.head(url, allow_redirects=True, timeout=60)
    response.raise_for_status()
    return int(response.headers.get("Content-Length", 0))


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = plain_environment()
    source = checkout(args, workdir)
    venv = workdir / "venv"
    subprocess.run([args.python, "-m", "venv", str(venv)], check=True, env=env)
    python = str(venv / "bin" / "python")
    pip_version = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, env=env,
                                 check=True).stdout.split()[1]
    target = f"{source}[{args.extras}]" if args.extras else str(source)
    command = [python, "-m", "pip", "install", "-q", "-e", target]
    result: dict[str, Any] = {"checkout": args.ref or str(source), "extras": args.extras, "pip": pip_version,
                              "machine": machine()}
    if args.dry_run:
        report = workdir / "report.json"
        command = [*command[:4], "--dry-run", "--ignore-installed", "--report", str(report), *command[4:]]
        progress(" ".join(command))
        started = time.perf_counter()
        subprocess.run(command, check=True, env=env, cwd=workdir)
        result["resolve_seconds"] = round(time.perf_counter() - started, 1)
        items = json.loads(report.read_text())["install"]
        with requests.Session() as session:
            sizes = {item["metadata"]["name"]: download_size(item["download_info"]["url"], session)
                     for item in items if not item["download_info"]["url"].startswith("file:")}
        result.update(mode="dry-run", packages=len(items), download_bytes=sum(sizes.values()),
                      largest={name: size for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:12]},
                      heavy=heavy(list(sizes)))
        return result
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, env=env, check=True).stdout.strip())
    # What the fresh venv holds before the install (its own pip and setuptools): reported apart, so that the
    # install's own share is plain too.
    result["venv_own_bytes"] = du_bytes(site)
    progress(" ".join(command))
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=workdir)
    result["install_seconds"] = round(time.perf_counter() - started, 1)
    listed = json.loads(subprocess.run([python, "-m", "pip", "list", "--format", "json"], capture_output=True,
                                       text=True, env=env, check=True).stdout)
    # An editable install leaves kb_bridge (and its 45 MB model) in the checkout: counted beside site-packages.
    site_bytes = du_bytes(site)
    result.update(mode="install", packages=len(listed), site_packages_bytes=site_bytes,
                  added_bytes=site_bytes - result["venv_own_bytes"],
                  kb_bridge_bytes=du_bytes(source / "kb_bridge"), heavy=heavy([item["name"] for item in listed]),
                  largest=largest_folders(site))
    if args.check_engine:
        # The engine's model loads and embeds in the fresh environment (no torch): the install is complete.
        check = ("from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, make_embedder; "
                 "m = make_embedder('onnx', bundled_model_dir(), batch_size=16, query_precision='float32', "
                 "query_threads=1, device='cpu', document_precision='float32', document_workers=1); "
                 "print(m.embed_query('hello').shape)")
        result["engine_embeds"] = subprocess.run([python, "-c", check], capture_output=True, text=True, env=env,
                                                 cwd=workdir).stdout.strip() == "(384,)"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, default=REPO, help="the directory to install (default: this one)")
    parser.add_argument("--ref", help="install this git commit of the repository instead (git archive)")
    parser.add_argument("--extras", default="engine", help="'' for the bridge alone")
    parser.add_argument("--dry-run", action="store_true", help="list what would be installed, and its download size")
    parser.add_argument("--check-engine", action="store_true", help="after installing, embed a text with the model")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the venv is made from")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-install-") as workdir:
        result = measure(args, Path(workdir))
    print(json.dumps(result, indent=2))
    write_result("install", result)


if __name__ == "__main__":
    main()
