"""Write _config.yml plus the published repository: its link and the Colab launch buttons.

    python scripts/book_config.py https://github.com/you/gpu-kernel-labbook build/_config.yml [--branch main]

`make book BOOK_REPOSITORY_URL=...` runs this and builds with the result, so the repository's URL is
one setting and no page links to a repository that does not exist. Without it, _config.yml has no
repository and no launch button.
"""

from __future__ import annotations

import argparse
import re
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("output", type=Path)
    parser.add_argument("--branch", default="main")
    args = parser.parse_args()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(yaml.safe_dump(published_config(args.url, args.branch), sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
