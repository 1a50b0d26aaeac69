"""Write _config.yml plus the published repository: its link and the Colab launch buttons.

    python scripts/book_config.py https://github.com/you/gpu-kernel-labbook build/_config.yml [--branch main]

`make book BOOK_REPOSITORY_URL=...` runs this and builds with the result, so the repository's URL is
one setting and no page links to a repository that does not exist. Without it, _config.yml has no
repository and no launch button. The output is never a committed file (_config.yml itself included).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GITHUB = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+")


def published_config(url: str, branch: str = "main", source: Path = ROOT / "_config.yml") -> dict:
    """_config.yml with ``repository`` and Colab's launch button; local extension paths made absolute
    (Jupyter Book resolves them from the config file's folder, which is no longer the book's)."""
    url = url.rstrip("/").removesuffix(".git")
    if not GITHUB.fullmatch(url):
        raise ValueError(
            f"BOOK_REPOSITORY_URL: expected https://github.com/<owner>/<name> (Colab opens "
            f"notebooks from GitHub), got {url!r}"
        )
    config = yaml.safe_load(source.read_text())
    extensions = config.get("sphinx", {}).get("local_extensions", {})
    for name, path in extensions.items():
        extensions[name] = str((source.parent / path).resolve())
    config["repository"] = {"url": url, "branch": branch}
    config.setdefault("launch_buttons", {})["colab_url"] = "https://colab.research.google.com"
    config.setdefault("html", {})["use_repository_button"] = True
    return config


def tracked(path: Path, root: Path = ROOT) -> bool:
    """Whether ``path`` is the committed config or a file git tracks in ``root``."""
    path = Path(path).resolve()
    if path == (root / "_config.yml").resolve():
        return True
    if not path.is_relative_to(root.resolve()) or not (root / ".git").exists():
        return False
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--", str(path)], capture_output=True, text=True, check=False
    )
    return bool(listed.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("output", type=Path)
    parser.add_argument("--branch", default="main")
    args = parser.parse_args(argv)
    if tracked(args.output):
        parser.error(
            f"output: {args.output} is a committed file, which this would rewrite (losing its comments, with "
            "absolute extension paths): write the published config elsewhere, e.g. build/_config.yml"
        )
    config = yaml.safe_dump(published_config(args.url, args.branch), sort_keys=False)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    tmp.write_text(config)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
