"""A thin, batched wrapper over the git CLI for the work ledger's side refs.

It owns every git process the work ledger starts: the environment they run in, how
their failures become `WorkLedgerError`s, and the batching of object reads and writes.

Invariants:

* Every call runs with ``LC_ALL=C``, ``GIT_TERMINAL_PROMPT=0``, ``commit.gpgSign=false``
  and the fixed identity ``harness <harness@localhost>``, so the same call behaves the
  same on every machine, needs no configured git user and never waits on a signer or a
  password prompt.
* The repository is the one found from the directory a `Git` is given (``--workdir``),
  never one an inherited environment names: every variable that locates a repository
  or redirects part of it (`REPO_ENV`: ``GIT_DIR``, ``GIT_WORK_TREE``,
  ``GIT_OBJECT_DIRECTORY``, ``GIT_NAMESPACE``, ``GIT_CEILING_DIRECTORIES``, …) is
  removed from the environment of every git process.
* Failures are decided by exit codes only, never by reading git's (localised) text; the
  text is only quoted in messages, scrubbed of secrets (`first_line`), as every path
  and remote a message names is.
* Object traffic is batched: a whole set of blobs is written by at most two git
  processes (a presence check and one ``fast-import``), and read by one ``cat-file
  --batch``, whatever the number of chunks. Blob ids are computed in Python, so
  objects the repository already holds are never sent again.
* Refs move only by compare-and-swap (`Git.update_ref` with the expected old value),
  and a fetch writes only the ref it names: no configured ``remote.<name>.fetch``
  refspec moves another (``--refmap=``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from . import NoLedger, WorkLedgerError, os_problem, secretless

IDENTITY_NAME = "harness"
IDENTITY_EMAIL = "harness@localhost"
DEFAULT_TIMEOUT = 120.0
NETWORK_TIMEOUT = 600.0


class GitFailed(WorkLedgerError):
    """A git command failed for a reason that is not about the ledger's content (exit 2)."""

    exit_code = 2


class RefMoved(GitFailed):
    """A compare-and-swap ref update lost a race: the ref no longer holds the expected value."""


# What `git rev-parse --local-env-vars` lists (the variables git itself drops when it
# moves into another repository), less the config ones, plus the variables that steer
# repository discovery (GIT_CEILING_DIRECTORIES, GIT_DISCOVERY_ACROSS_FILESYSTEM) and
# GIT_NAMESPACE, which would put the side refs under refs/namespaces/<ns>/. Inherited
# from a hook, an alias or a shell that exported GIT_DIR, any of them would make git
# read or write another repository than the one --workdir names, or write the anchor's
# objects somewhere its refs cannot reach them.
REPO_ENV: Final = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
    "GIT_REPLACE_REF_BASE",
    "GIT_NO_REPLACE_OBJECTS",
)


def located_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` without the variables that would choose the repository for git (`REPO_ENV`),
    so the directory git runs in decides which repository it works on."""
    return {k: v for k, v in base.items() if k not in REPO_ENV}


def _env() -> dict[str, str]:
    env = located_env(os.environ)
    env.update(
        LC_ALL="C",
        LANGUAGE="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=IDENTITY_NAME,
        GIT_AUTHOR_EMAIL=IDENTITY_EMAIL,
        GIT_COMMITTER_NAME=IDENTITY_NAME,
        GIT_COMMITTER_EMAIL=IDENTITY_EMAIL,
    )
    # An askpass helper could still pop up a dialog or block; the prompt switch above
    # only covers the terminal.
    env.pop("GIT_ASKPASS", None)
    env.pop("SSH_ASKPASS", None)
    return env


def first_line(stderr: bytes) -> str:
    """The first non-empty line of git's stderr, for quoting in a message: scrubbed, since
    git quotes remote URLs and paths, either of which can carry a credential."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.strip():
            return secretless(line.strip())
    return ""


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    type: str
    oid: str
    name: str


class Git:
    """One repository, addressed by a directory inside its work tree (or a bare repo)."""

    def __init__(
        self, directory: Path, object_format: str = "sha1", git_dir: Path | None = None
    ) -> None:
        self.directory = directory
        self.object_format = object_format
        self.git_dir = git_dir if git_dir is not None else directory / ".git"
        self.zero_oid = "0" * (64 if object_format == "sha256" else 40)
        self._env = _env()

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> Git:
        """The repository containing `directory`; `NoLedger` when there is none."""
        path = Path(directory)
        if not path.is_dir():
            raise NoLedger(f"not a git repository: {secretless(path)} (no such directory)")
        probe = cls(path)
        res = probe.run(["rev-parse", "--show-object-format", "--absolute-git-dir"],
                        check=False)
        if res.returncode != 0:
            raise NoLedger(f"not a git repository: {secretless(path)}")
        out = res.stdout.decode("utf-8", "surrogateescape").splitlines()
        if len(out) != 2:
            raise GitFailed(f"git rev-parse gave unexpected output in {secretless(path)}")
        return cls(path, out[0].strip() or "sha1", Path(out[1]))

    # -- process plumbing ---------------------------------------------------------------

    def run(
        self,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        check: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``git ARGS`` in the repository; raise `GitFailed` on a non-zero exit if `check`."""
        argv = ["git", "-C", str(self.directory), "-c", "commit.gpgSign=false",
                "-c", "tag.gpgSign=false", *args]
        try:
            res = subprocess.run(
                argv,
                input=stdin if stdin is not None else b"",
                capture_output=True,
                env=self._env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitFailed(
                f"git {args[0]} timed out after {timeout:g}s in {secretless(self.directory)}"
            ) from None
        except OSError as exc:
            raise GitFailed(f"cannot run git: {os_problem(exc)}") from exc
        if check and res.returncode != 0:
            raise GitFailed(
                f"git {args[0]} failed (exit {res.returncode}) in "
                f"{secretless(self.directory)}: {first_line(res.stderr)}"
            )
        return res

    # -- objects ------------------------------------------------------------------------

    def blob_id(self, data: bytes) -> str:
        """The id git gives `data` as a blob, computed without asking git."""
        h = hashlib.new(self.object_format)
        h.update(b"blob %d\0" % len(data))
        h.update(data)
        return h.hexdigest()

    def present(self, oids: Iterable[str]) -> set[str]:
        """Which of `oids` the repository already has (one ``cat-file --batch-check``)."""
        wanted = list(dict.fromkeys(oids))
        if not wanted:
            return set()
        # The format prints only the id for a present object; an absent one is reported
        # as "<id> missing", so a line with a single field means "present".
        res = self.run(
            ["cat-file", "--batch-check=%(objectname)"],
            stdin=("\n".join(wanted) + "\n").encode("ascii"),
        )
        have: set[str] = set()
        for line in res.stdout.decode("ascii", "replace").splitlines():
            fields = line.split()
            if len(fields) == 1:
                have.add(fields[0])
        return have

    def write_blobs(
        self,
        blobs: Sequence[bytes],
        ids: Sequence[str] | None = None,
        known: Iterable[str] = (),
    ) -> list[str]:
        """Store `blobs`, sending only those the repository lacks; return their ids in order.

        `ids` are the blobs' ids when the caller already computed them; `known` names ids
        the caller knows the repository holds (the chunks of the tree being extended), so
        they are not even asked about.
        """
        if ids is None:
            ids = [self.blob_id(b) for b in blobs]
        have = set(known)
        have |= self.present(i for i in ids if i not in have)
        todo: dict[str, bytes] = {}
        for oid, data in zip(ids, blobs, strict=True):
            if oid not in have:
                todo.setdefault(oid, data)
        if todo:
            # fast-import takes any number of blobs in one stream and one process,
            # instead of one hash-object per chunk.
            parts: list[bytes] = []
            for data in todo.values():
                parts.append(b"blob\ndata %d\n" % len(data))
                parts.append(data)
                parts.append(b"\n")
            parts.append(b"done\n")
            self.run(["fast-import", "--quiet", "--done"], stdin=b"".join(parts))
            missing = set(todo) - self.present(todo)
            if missing:
                raise GitFailed(f"git did not store blob {sorted(missing)[0]}")
        return list(ids)

    def read_objects(self, oids: Sequence[str]) -> list[tuple[str, bytes] | None]:
        """(type, content) of each of `oids` in order, None where absent; one ``cat-file``."""
        if not oids:
            return []
        res = self.run(
            ["cat-file", "--batch"], stdin=("\n".join(oids) + "\n").encode("ascii")
        )
        out: list[tuple[str, bytes] | None] = []
        buf = res.stdout
        pos = 0
        for _ in oids:
            nl = buf.index(b"\n", pos)
            header = buf[pos:nl].split()
            pos = nl + 1
            if len(header) != 3:
                # "<name> missing" or "<name> ambiguous"
                out.append(None)
                continue
            size = int(header[2])
            out.append((header[1].decode("ascii"), buf[pos : pos + size]))
            pos += size + 1
        return out

    def ls_tree(self, treeish: str) -> list[TreeEntry]:
        """The top-level entries of a tree (or of a commit's tree)."""
        res = self.run(["ls-tree", "-z", "--full-tree", treeish])
        entries: list[TreeEntry] = []
        for rec in res.stdout.split(b"\0"):
            if not rec:
                continue
            meta, _, name = rec.partition(b"\t")
            mode, typ, oid = meta.decode("ascii").split()
            entries.append(TreeEntry(mode, typ, oid, name.decode("utf-8", "surrogateescape")))
        return entries

    def mktree(self, blobs: Sequence[tuple[str, str]]) -> str:
        """A flat tree of regular files from (name, blob id) pairs; return its id."""
        body = b"".join(
            b"100644 blob %s\t%s\0" % (oid.encode("ascii"), name.encode("utf-8"))
            for name, oid in sorted(blobs)
        )
        return self.run(["mktree", "-z"], stdin=body).stdout.decode("ascii").strip()

    def tree_id(self, blobs: Sequence[tuple[str, str]]) -> str:
        """The id `mktree` would give the same flat tree, computed without writing it
        (git sorts a flat tree's entries by name, as bytes)."""
        body = b"".join(
            b"100644 %s\0%s" % (name.encode("utf-8"), bytes.fromhex(oid))
            for name, oid in sorted(blobs, key=lambda b: b[0].encode("utf-8"))
        )
        h = hashlib.new(self.object_format)
        h.update(b"tree %d\0" % len(body))
        h.update(body)
        return h.hexdigest()

    def commit_tree(self, tree: str, parents: Sequence[str], message: str) -> str:
        """A commit of `tree` with `parents`, unsigned, by the fixed identity."""
        args = ["commit-tree", "--no-gpg-sign", tree]
        for p in parents:
            args += ["-p", p]
        args += ["-F", "-"]
        return self.run(args, stdin=message.encode("utf-8")).stdout.decode("ascii").strip()

    def read_commit(self, oid: str) -> tuple[str, list[str]]:
        """(tree, parents) of commit `oid`; `GitFailed` when it is not a commit."""
        obj = self.read_objects([oid])[0]
        if obj is None or obj[0] != "commit":
            raise GitFailed(f"{oid} is not a commit")
        tree = ""
        parents: list[str] = []
        for line in obj[1].split(b"\n"):
            if not line:
                break  # the headers end at the first blank line
            key, _, value = line.partition(b" ")
            if key == b"tree":
                tree = value.decode("ascii")
            elif key == b"parent":
                parents.append(value.decode("ascii"))
        return tree, parents

    # -- refs ---------------------------------------------------------------------------

    def resolve(self, ref: str) -> str | None:
        """The object id `ref` holds, or None when the ref does not exist."""
        res = self.run(["rev-parse", "--verify", "--quiet", "--end-of-options", ref],
                       check=False)
        if res.returncode != 0:
            return None
        return res.stdout.decode("ascii").strip()

    def update_ref(self, ref: str, new: str, old: str | None, reason: str = "harness") -> None:
        """Move `ref` from `old` (None: it must not exist) to `new`, atomically or not at all."""
        res = self.run(
            ["update-ref", "-m", reason, ref, new, old or self.zero_oid], check=False
        )
        if res.returncode != 0:
            raise RefMoved(
                f"{ref} changed while harness was updating it (another anchor or fetch ran "
                f"at the same time); nothing was changed, run the command again "
                f"({first_line(res.stderr)})"
            )

    def delete_ref(self, ref: str, old: str, reason: str = "harness") -> None:
        """Delete `ref` if it still names `old`, atomically or not at all."""
        res = self.run(["update-ref", "-m", reason, "-d", ref, old], check=False)
        if res.returncode != 0:
            raise RefMoved(
                f"{ref} changed while harness was deleting it (another anchor or fetch ran "
                f"at the same time); it was left as it is ({first_line(res.stderr)})"
            )

    def for_each_ref(self, prefix: str) -> list[tuple[str, str]]:
        """(refname, object id) of every ref under `prefix`, sorted by name."""
        res = self.run(["for-each-ref", "--format=%(refname) %(objectname)", prefix])
        out: list[tuple[str, str]] = []
        for line in res.stdout.decode("utf-8", "surrogateescape").splitlines():
            name, _, oid = line.rpartition(" ")
            out.append((name, oid))
        return out

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether `ancestor` is reachable from `descendant` (exit 0 yes, 1 no)."""
        res = self.run(["merge-base", "--is-ancestor", ancestor, descendant], check=False)
        if res.returncode not in (0, 1):
            raise GitFailed(f"git merge-base failed (exit {res.returncode}): "
                            f"{first_line(res.stderr)}")
        return res.returncode == 0

    def count_commits(self, commit: str) -> int:
        return int(self.run(["rev-list", "--count", commit]).stdout.decode("ascii").strip())

    # -- remotes ------------------------------------------------------------------------

    def _advertised(self, remote: str, ref: str) -> str | None:
        """The id `remote` advertises for `ref`, when it has fetched objects for it."""
        res = self.run(["ls-remote", "--exit-code", "--end-of-options", remote, ref],
                       check=False, timeout=NETWORK_TIMEOUT)
        oid = res.stdout.decode("ascii", "replace").split("\t", 1)[0].strip()
        if res.returncode != 0 or not oid or not self.present([oid]):
            return None  # moved after the fetch: its objects may not be here
        return oid

    def fetch_ref(self, remote: str, src: str, dst: str | None) -> str:
        """Fetch `src` from `remote` into the local ref `dst` (forced); return its id.
        With `dst` None the objects are fetched and no ref is written: the id is the
        one the remote advertised.

        `NoLedger` when the remote cannot be read or has no such ref; which of the two
        is decided by exit codes (``remote get-url``: 2 = no such remote;
        ``ls-remote --exit-code``: 2 = no matching ref).
        """
        # An empty --refmap: only the refspec given here maps the fetched ref. Without it
        # git also updates, "opportunistically", every local ref a configured
        # remote.<name>.fetch maps `src` to, and a wildcard one for the side refs (the
        # natural companion of pushing them) would move refs/harness/work-ledger/<run-id>
        # itself: during a dry run, and over a lineage fetch is about to refuse.
        res = self.run(
            ["fetch", "--no-tags", "--no-write-fetch-head", "--quiet", "--refmap=",
             "--end-of-options", remote, f"+{src}:{dst}" if dst is not None else src],
            check=False,
            timeout=NETWORK_TIMEOUT,
        )
        if res.returncode == 0:
            oid = self.resolve(dst) if dst is not None else self._advertised(remote, src)
            if oid is None:
                raise GitFailed(f"git fetch reported success but {dst or src} does not exist")
            return oid
        why = first_line(res.stderr)
        probe = self.run(["ls-remote", "--exit-code", "--end-of-options", remote, src],
                         check=False, timeout=NETWORK_TIMEOUT)
        # A remote given as a URL may carry a user's password or token.
        shown = secretless(remote)
        if probe.returncode == 2:
            raise NoLedger(f"remote '{shown}' has no {src}: nothing was anchored and pushed "
                           "for this run there")
        named = self.run(["remote", "get-url", "--end-of-options", remote], check=False)
        if named.returncode == 2 and not _looks_like_location(remote):
            raise NoLedger(f"no remote named '{shown}' in {secretless(self.directory)} "
                           "(`git remote -v` lists them; --remote picks one)")
        if probe.returncode == 0:
            raise GitFailed(f"git fetch of {src} from '{shown}' failed: {why}")
        raise NoLedger(f"cannot read remote '{shown}': {why or first_line(probe.stderr)}")


def _looks_like_location(remote: str) -> bool:
    return "/" in remote or ":" in remote or remote.startswith(".")
