"""Check commit messages as git expects them: a subject of at most 72 characters, then (if
there is a body) a blank line.

    python scripts/check_commit_messages.py --range BASE..HEAD   # every commit of a range (.ci/run)
    python scripts/check_commit_messages.py MESSAGE_FILE         # one message (.githooks/commit-msg)

Prints one line per message that breaks a rule and exits 1 if any does. The range's commits are
those git log lists (merge commits included); a range whose base the clone lacks (a shallow
clone) is checked from the oldest commit the clone has.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with one commit message (comment lines of an editor's template dropped)."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or not lines[0].strip():
        return ["the subject line is empty"]
    found = []
    if len(lines[0]) > MAX_SUBJECT:
        found.append(f"the subject is {len(lines[0])} characters, more than {MAX_SUBJECT}")
    if len(lines) > 1 and lines[1].strip():
        found.append("the subject is not followed by a blank line")
    return found


def range_messages(revisions: str) -> list[tuple[str, str]]:
    """(short hash, message) of every commit in ``revisions`` (git log's range syntax)."""
    base = revisions.split("..")[0] if ".." in revisions else None
    if base and subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"], capture_output=True).returncode:
        revisions = revisions.split("..", 1)[1] or "HEAD"  # a shallow clone: what it has
    log = subprocess.run(["git", "log", "--format=%h%x00%B%x01", revisions], capture_output=True, text=True,
                         check=True).stdout
    return [tuple(entry.strip("\n").split("\0", 1)) for entry in log.split("\x01") if entry.strip()]  # type: ignore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("message_file", nargs="?", type=Path)
    parser.add_argument("--range", dest="revisions")
    args = parser.parse_args(argv)
    if (args.message_file is None) == (args.revisions is None):
        parser.error("give a message file or --range")
    messages = ([("message", args.message_file.read_text(encoding="utf-8"))] if args.message_file
                else range_messages(args.revisions))
    failed = False
    for name, message in messages:
        for problem in problems(message):
            print(f"{name}: {problem}: {message.splitlines()[0][:80] if message.strip() else ''}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
