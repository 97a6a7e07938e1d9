"""``git grep`` and ``git cat-file --batch`` over one tree, without a working tree: which files mention a
text, and many blobs at once.

Used where the engine and the reads need a cheap superset of the pages to look at
(``HeadView.mentioning``: a rename's rewrite_links, a dry run's broken links, backlinks) and by literal
search. git reads the blobs in C with its delta cache; on a 10 000-page wiki a pass over every page takes
~30 ms where reading them in Python takes ~0.9 s.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Generator, Sequence
from pathlib import Path

# Over a tree, git grep's threads contend for the object store's lock: one thread is faster (figures in
# docs/benchmarks.md, "Measurements behind choices").
THREADS = "--threads=1"
SEARCH_FILE_BYTES = 8 * 1024 * 1024  # files over this are not searched or indexed (the default page limit)


def files_mentioning(
    git_dir: Path, tree: str, needles: Sequence[str], *, ignore_case: bool = True
) -> list[str]:
    """Paths of the files of ``tree`` whose bytes contain one of ``needles`` (literal; ASCII case ignored
    unless ``ignore_case`` is false), in path order. A needle may not hold a line break."""
    if not needles:
        return []
    args = ["git", "--git-dir", str(git_dir), "grep", "-l", "-z", "-F", "--no-color", THREADS]
    if ignore_case:
        args.append("-i")
    for needle in needles:
        if "\n" in needle or "\r" in needle:
            raise ValueError("a grep needle is one line")
        args += ["-e", needle]
    # LC_ALL=C: -i folds ASCII letters only (in a UTF-8 locale git would also fold the Kelvin sign to k)
    env = {**os.environ, "LC_ALL": "C"}
    done = subprocess.run([*args, tree, "--"], capture_output=True, check=False, env=env)
    if done.returncode not in (0, 1):  # 1: nothing found
        raise RuntimeError(f"git grep failed: {done.stderr.decode('utf-8', 'replace').strip()[:200]}")
    prefix = tree.encode() + b":"
    return [
        item.removeprefix(prefix).decode("utf-8", "surrogateescape")
        for item in done.stdout.split(b"\x00")
        if item
    ]


def iter_blobs(git_dir: Path, oids: Sequence[str], max_size: int) -> Generator[bytes | None, None, None]:
    """The bytes of each blob, in order, streamed from one ``git cat-file --batch``: one blob at a time
    is in memory, and a blob over ``max_size`` bytes is read past and given as None. Stopping early
    (closing the generator) ends the git process."""
    if not oids:
        return
    process = subprocess.Popen(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch", "--buffer"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def ask() -> None:  # a thread of its own: git answers while it is still being asked
        try:
            for oid in oids:
                stdin.write(oid.encode() + b"\n")
            stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the reader stopped early and ended git

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    try:
        for _ in oids:
            header = stdout.readline(512).split()
            if len(header) != 3:
                raise RuntimeError(f"git cat-file answered {b' '.join(header)[:80]!r} for a blob")
            size = int(header[2])
            if size > max_size:
                left = size + 1
                while left:
                    chunk = stdout.read(min(left, 1 << 16))
                    if not chunk:
                        raise RuntimeError("git cat-file stopped in the middle of a blob")
                    left -= len(chunk)
                yield None
                continue
            data = stdout.read(size + 1)
            if len(data) != size + 1:
                raise RuntimeError("git cat-file stopped in the middle of a blob")
            yield data[:size]
    finally:
        process.kill()
        process.wait()
        asking.join()
        stdout.close()
        if not stdin.closed:
            stdin.close()


def read_blobs(git_dir: Path, oids: list[str]) -> list[bytes]:
    """The bytes of each blob, in order, from one ``git cat-file --batch``."""
    if not oids:
        return []
    request = "".join(oid + "\n" for oid in oids).encode()
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch", "--buffer"],
        input=request,
        capture_output=True,
        check=True,
    ).stdout
    found: list[bytes] = []
    position = 0
    for _ in oids:
        end = out.index(b"\n", position)
        size = int(out[position:end].split()[2])
        found.append(out[end + 1 : end + 1 + size])
        position = end + 1 + size + 1
    return found
