#!/usr/bin/env python3
"""Every file a doc or comment names must exist in this repository.

Scans README.md, docs/, core/, plugins/, sdk/, tests/, bench/, scripts/,
cmake/ and the CMake files for
  - repository paths: a token starting with a top-level folder
    (core/engine/engine.cc, docs/zero.md, tests/fakes/, plugins/comm/mpi);
  - Markdown links and "file.md#anchor" references, anchors included;
  - bare file names with a source or doc extension (partition.h,
    checkpoints.md): some file of that name must exist somewhere in the tree;
  - anything outside the repository: "../shared", REFERENCE.md, DESIGN.md
    (the facts they held live in docs/deepspeed-reference.md and
    docs/architecture.md).
and prints every reference that does not resolve as file:line: reference.

A path resolves from the repository root or from the citing file's folder; a
path without extension may name a program or a .h/.cc pair (bench/gpt_train,
core/base/logging). Not checked: placeholders (core/<lib>/,
sdk/include/dscore/*.h, sdk/abi/v1.N/), a path right after "DeepSpeed's " (a
file of DeepSpeed's repository), C++ `prefix / "x/y"` joins, #include <...>
lines, and the frozen ABI copy under sdk/abi/v1.0 (it never changes).

Usage: doc_references.py [repository root]   (default: two levels up)
Exit status 0 when all resolve, 1 otherwise. Run by ctest (tests/layering).
"""
import os
import re
import sys

# Where references are looked for.
SCAN_ROOTS = ["README.md", "CMakeLists.txt", "docs", "core", "plugins", "sdk", "tests", "bench",
              "scripts", "cmake", ".ci"]
SCAN_EXTENSIONS = {".md", ".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inc", ".py", ".sh",
                   ".cmake", ".txt", ".in", ".map", ""}
# Not prose: fuzz inputs, data, the frozen ABI copies (byte-identical to a
# released header; fixed only by a new release).
SKIP_DIRS = {"tests/fuzz/corpus", "configs/data", "sdk/abi/v1.0"}
SKIP_FILES = {"tests/layering/doc_references.py"}  # this file names bad references on purpose

# Top-level folders a repository path starts with, plus folders that do not
# exist but that a stale comment could name (so those are caught too).
TOP_DIRS = ["docs", "core", "plugins", "sdk", "tests", "bench", "scripts", "cmake", "configs",
            "tools", "src"]
# Bare file names checked against every file name in the tree.
BARE_EXTENSIONS = ("h", "hpp", "cc", "cu", "cuh", "md", "cmake", "sh")
# Bare names that belong to other projects and are cited as such (extend
# when a comment names a system or third-party file).
EXTERNAL_NAMES = {"stdint.h", "stddef.h", "nccl.h", "mpi.h", "cuda_runtime.h", "cuda_runtime_api.h",
                  "cublas_v2.h"}

PATH_CHARS = r"[A-Za-z0-9_.\-/<>*{}$@]"
# A repository path: not preceded by a path character, so "/work/x/core/..."
# and "build/release/bin" do not count.
PATH_RE = re.compile(r"(?<![A-Za-z0-9_.\-/])((?:%s)/%s*)" % ("|".join(TOP_DIRS), PATH_CHARS))
MD_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
MD_ANCHOR_RE = re.compile(r"(?<![A-Za-z0-9_.\-/])([A-Za-z0-9_.\-/]*\.md)#([A-Za-z0-9_\-]+)")
BARE_RE = re.compile(r"(?<![A-Za-z0-9_.\-/<>#*{}$])([A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*\.(?:%s))"
                     r"(?![A-Za-z0-9_]|\.[A-Za-z0-9_\"'])"
                     % "|".join(BARE_EXTENSIONS))
FORBIDDEN_RE = re.compile(r"\.\./shared|\bREFERENCE\.md|\bDESIGN\.md")
# "DeepSpeed's tests/unit/..." names a file of DeepSpeed's repository.
DEEPSPEED_PATH_RE = re.compile(r"DeepSpeed(?:'s)? `?$")
INCLUDE_RE = re.compile(r"^\s*#\s*include\s*<")


def slug(heading):
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    if path not in cache:
        found = set()
        counts = {}
        in_code = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("```"):
                    in_code = not in_code
                    continue
                if in_code:
                    continue
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    s = slug(m.group(1))
                    n = counts.get(s, 0)
                    counts[s] = n + 1
                    found.add(s if n == 0 else "%s-%d" % (s, n))
                for a in re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
                    found.add(a)
        cache[path] = found
    return cache[path]


def files_to_scan(root):
    for entry in SCAN_ROOTS:
        full = os.path.join(root, entry)
        if os.path.isfile(full):
            yield entry
            continue
        for dirpath, dirnames, filenames in os.walk(full):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames
                                 if os.path.join(rel_dir, d) not in SKIP_DIRS and not d.startswith("build"))
            for name in sorted(filenames):
                rel = os.path.join(rel_dir, name)
                if rel in SKIP_FILES or os.path.splitext(name)[1] not in SCAN_EXTENSIONS:
                    continue
                yield rel


def all_basenames(root):
    names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git" and not (dirpath == root and d == "build")]
        names.update(filenames)
    return names


def clean(token):
    token = token.rstrip(".,;:)'\"`")
    token = re.sub(r":\d+(-\d+)?$", "", token)  # file:line
    return token


def is_placeholder(token):
    # core/<lib>/, sdk/include/dscore/*.h, ${dir}, sdk/abi/v1.N/
    return any(c in token for c in "<>*{}$@") or re.search(r"/v\d+\.N(/|$)", token) is not None


def resolve(root, rel_file, path):
    """The file or folder `path` names, from the repository root or from the
    citing file's folder; a path without extension may name the sources of a
    program or the .h/.cc pair of a unit (bench/gpt_train, core/base/logging)."""
    for base in (root, os.path.join(root, os.path.dirname(rel_file))):
        full = os.path.normpath(os.path.join(base, path))
        if os.path.exists(full):
            return full
        folder, stem = os.path.split(full)
        if os.path.isdir(folder) and "." not in stem and any(
                f.startswith(stem + ".") for f in os.listdir(folder)):
            return full
    return None


def check_path(root, rel_file, token):
    """None when `token` (a path) resolves, else why not."""
    path, _, anchor = token.partition("#")
    if is_placeholder(path):
        return None
    if path.endswith("..."):
        path = path[:-3]
    full = resolve(root, rel_file, path)
    if full is None:
        return "no such file or folder"
    if anchor and path.endswith(".md") and anchor not in anchors_of(full):
        return "no heading with anchor #%s in %s" % (anchor, path)
    return None


def check_file(root, rel_file, basenames):
    problems = []
    full = os.path.join(root, rel_file)
    try:
        with open(full, encoding="utf-8") as f:
            lines = f.readlines()
    except UnicodeDecodeError:
        return problems
    is_md = rel_file.endswith(".md")
    in_code = False
    for number, line in enumerate(lines, 1):
        where = "%s:%d" % (rel_file, number)
        if is_md and line.lstrip().startswith("```"):
            in_code = not in_code
        for m in FORBIDDEN_RE.finditer(line):
            problems.append("%s: %s: points outside the repository; cite docs/deepspeed-reference.md "
                            "or docs/architecture.md instead" % (where, m.group(0)))
        if INCLUDE_RE.match(line):
            continue
        seen = set()
        for m in PATH_RE.finditer(line):
            token = clean(m.group(1))
            if "/" not in token or token in seen:
                continue
            if DEEPSPEED_PATH_RE.search(line[:m.start()]):
                continue  # a path in DeepSpeed's repository, named as such
            if line[:m.start()].endswith('/ "'):
                continue  # C++ `dir / "x/y"`: relative to some other folder (an install prefix)
            seen.add(token)
            why = check_path(root, rel_file, token)
            if why:
                problems.append("%s: %s: %s" % (where, token, why))
        # Markdown links and file.md#anchor, relative to the file's folder.
        links = [m.group(1) for m in MD_LINK_RE.finditer(line)] if is_md and not in_code else []
        links += ["%s#%s" % m.groups() for m in MD_ANCHOR_RE.finditer(line)]
        for link in links:
            if re.match(r"^[a-z]+:", link) or link in seen:
                continue
            seen.add(link)
            path, _, anchor = link.partition("#")
            if not path:
                target = rel_file
            elif path.split("/")[0] in TOP_DIRS and not os.path.exists(os.path.join(root, os.path.dirname(rel_file), path)):
                target = path  # written from the repository root
            else:
                target = os.path.normpath(os.path.join(os.path.dirname(rel_file), path))
            why = check_path(root, rel_file, target + ("#" + anchor if anchor else ""))
            if why:
                problems.append("%s: %s: %s" % (where, link, why))
        for m in BARE_RE.finditer(line):
            name = m.group(1)
            if name in EXTERNAL_NAMES or name in basenames or name in seen or FORBIDDEN_RE.match(name):
                continue
            seen.add(name)
            problems.append("%s: %s: no file of that name in the repository" % (where, name))
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    basenames = all_basenames(root)
    problems = []
    count = 0
    for rel in files_to_scan(root):
        count += 1
        problems.extend(check_file(root, rel, basenames))
    for p in problems:
        print(p)
    if problems:
        print("doc_references: %d reference(s) in %d files do not resolve inside the repository"
              % (len(problems), count))
        return 1
    print("doc_references: every reference in %d files resolves" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
