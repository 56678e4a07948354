"""A launch script read as the shell would read it, never run: the words of the command that starts the
framework, with the line each word came from, and what the reading assumed. Guide: ``docs/import.md``.

What is understood (POSIX shell / bash, the subset launch scripts use):

* ``#`` comments, backslash line continuations, ``;`` / ``&&`` / ``||`` / ``|`` between commands,
  redirections (``> log``, ``2>&1``, ``| tee log``);
* ``NAME=value`` and ``export NAME=value`` (also ``local``/``declare``/``readonly``), arrays
  ``NAME=(a b c)`` over several lines, ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``,
  ``${NAME:=default}``, ``${NAME[@]}``, arithmetic ``$(( ... ))`` on integers; variables the file does
  not set keep their ``${NAME}`` text and are listed (the user's environment is never read);
* ``if [ A = B ]; then ... elif ... else ... fi`` with ``=``/``==``/``!=``/``-z``/``-n``/``-eq``...
  comparisons of known values; an undecidable condition takes its first branch and says so;
* launchers, nested: ``ray job submit ... -- CMD``, ``uv run [opts] CMD``, ``torchrun [opts]``,
  ``accelerate launch [opts]``, ``deepspeed [opts]``, ``srun [opts]``, ``nohup``/``exec``/``env``,
  then ``python[3] [-u] -m MODULE`` or ``python SCRIPT.py`` or a console script (``trl grpo``, ``rl``).

Command substitution ``$(...)`` and back-quotes are never executed: the text is kept and listed.
Word splitting follows the shell: an unquoted expansion splits on blanks, a quoted one does not.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field

from sandbox.importers.errors import ConfigImportError


@dataclass(frozen=True)
class Word:
    text: str
    line: int


@dataclass
class Launch:
    """The command that starts the framework: ``entry`` (a module after ``-m``, a script path, or a
    console script name), its ``args``, the launchers around it (``launcher_args``: their words, e.g.
    ``torchrun --nproc_per_node 8``), the variables set, and ``notes`` on every assumption made."""

    path: str
    entry: str | None = None
    entry_line: int = 0
    args: list[Word] = field(default_factory=list)
    launchers: list[str] = field(default_factory=list)
    launcher_args: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unresolved: dict[str, int] = field(default_factory=dict)
    others: list[tuple[str, int]] = field(default_factory=list)  # commands that are no launcher (not run)


UNSET = "\x00"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ASSIGN = re.compile(rf"^({_NAME})(\+?)=(.*)$", re.S)
KEYWORDS_SKIP = {"then", "do", "done", "{", "}", "esac", "function"}
NON_LAUNCH = {
    "set",
    "cd",
    "mkdir",
    "echo",
    "printf",
    "source",
    ".",
    "unset",
    "trap",
    "wait",
    "sleep",
    "exit",
    "shift",
    "pip",
    "pip3",
    "wget",
    "curl",
    "git",
    "rm",
    "cp",
    "mv",
    "ln",
    "ls",
    "cat",
    "touch",
    "hf",
    "huggingface-cli",
    "nvidia-smi",
    "ulimit",
    "pkill",
    "kill",
    "true",
    "false",
    "return",
    "local",
    "declare",
    "readonly",
    "pushd",
    "popd",
    "tee",
    "date",
    "sed",
    "awk",
    "grep",
    "head",
    "tail",
    "chmod",
    "conda",
    "module",
}
PYTHON = re.compile(r"^(?:.*/)?python(?:\d(?:\.\d+)?)?$")
# launcher options that take no value (the others take one, unless written --opt=value)
_BOOL_OPTS = {
    "torchrun": {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module"},
    "accelerate": {
        "--multi_gpu",
        "--use_deepspeed",
        "--use_fsdp",
        "--use_megatron_lm",
        "--debug",
        "--tpu",
        "--cpu",
        "--quiet",
        "-q",
        "--same_network",
        "--rdzv_conf",
        "--module",
        "--no_python",
    },
    "deepspeed": {
        "--no_python",
        "--no_local_rank",
        "--module",
        "--force_multi",
        "--autotuning",
        "--enable_each_rank_log",
    },
    "srun": {"--exclusive", "--overlap", "-l", "--label", "--unbuffered", "-u"},
    "uv": {
        "--no-sync",
        "--frozen",
        "--locked",
        "--isolated",
        "--no-project",
        "--active",
        "--all-extras",
        "--no-dev",
        "-q",
        "--quiet",
        "-v",
        "--verbose",
        "--offline",
        "--no-cache",
    },
}


def _arith(expr: str) -> int:
    """An integer arithmetic expression (+ - * / % ** and parentheses), as $(( )) evaluates it."""
    ops = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv,
        ast.Mod: operator.mod,
        ast.Pow: operator.pow,
    }

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        raise ValueError(expr)

    return ev(ast.parse(expr.replace("/", "//").replace("////", "//"), mode="eval"))


class _Reader:
    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.vars: dict[str, list[str] | str] = {}
        self.out = Launch(path)
        self.item_lines: dict[str, int] = {}

    # -- expansion ----------------------------------------------------------------------------------
    def note_once(self, text: str) -> None:
        if text not in self.out.notes:
            self.out.notes.append(text)

    def lookup(self, name: str, line: int) -> str | None:
        v = self.vars.get(name)
        if v is None:
            return None
        return v[0] if isinstance(v, list) and v else ("" if isinstance(v, list) else v)

    def unresolved(self, name: str, line: int) -> None:
        self.out.unresolved.setdefault(name, line)

    def word_value(self, word: str, line: int) -> str:
        """A shell word (quotes and all) to its value: expanded, then quotes removed."""
        parts = self.split(self.expand(word, line), line)
        return " ".join(parts)

    def split(self, text: str, line: int) -> list[str]:
        try:
            return shlex.split(text, comments=False, posix=True)
        except ValueError as exc:
            raise ConfigImportError(f"{self.path}: line {line}: {exc} (unbalanced quotes)") from None

    @staticmethod
    def _quote(value: str, in_double: bool) -> str:
        if in_double:
            return re.sub(r'(["\\])', r"\\\1", value)  # expansion happens once: only quote and backslash
        return " ".join(shlex.quote(p) for p in value.split()) if value.strip() else ""

    def _param(self, body: str, line: int, in_double: bool) -> str:
        m = re.fullmatch(rf"({_NAME})\[[@*]\]", body)
        if m:
            v = self.vars.get(m.group(1))
            if v is None:
                self.unresolved(m.group(1), line)
                return "${" + body + "}"
            items = v if isinstance(v, list) else [v]
            return " ".join(self._quote(x, in_double) if not in_double else self._quote(x, True) for x in items)
        m = re.fullmatch(rf"({_NAME}|\d+|[@*#])(?:(:?[-=+?])(.*))?", body, re.S)
        if not m:
            self.note_once(f"line {line}: ${{{body}}} is not expanded (an unsupported parameter expansion)")
            return "${" + body + "}"
        name, op, default = m.group(1), m.group(2), m.group(3)
        if name in ("@", "*"):
            self.note_once(f"line {line}: ${name}: arguments passed to the script are not known; none assumed")
            return ""
        value = self.lookup(name, line)
        empty = value is None or (op is not None and op.startswith(":") and value == "")
        if op and op.strip(":") in ("-", "=") and empty:
            dv = self.word_value(default or "", line)
            if op.strip(":") == "=":
                self.vars[name] = dv
            self.note_once(f"line {line}: {name} is not set in the file: its default {dv!r} is used")
            return self._quote(dv, in_double)
        if op and op.strip(":") == "+":
            return "" if empty else self._quote(self.word_value(default or "", line), in_double)
        if value is None:
            self.unresolved(name, line)
            return "${" + name + "}"
        return self._quote(value, in_double)

    def expand(self, s: str, line: int) -> str:
        """Parameter and arithmetic expansion outside single quotes; the result is shell text again
        (expanded values quoted so that re-reading keeps them one word where the shell would)."""
        out: list[str] = []
        i, n = 0, len(s)
        single = double = False
        while i < n:
            c = s[i]
            if c == "'" and not double:
                single = not single
                out.append(c)
                i += 1
            elif single:
                out.append(c)
                i += 1
            elif c == "\\" and i + 1 < n:
                out.append(s[i : i + 2])
                i += 2
            elif c == '"':
                double = not double
                out.append(c)
                i += 1
            elif c == "`":
                j = s.find("`", i + 1)
                j = n - 1 if j < 0 else j
                self.note_once(f"line {line}: {s[i : j + 1]} (command substitution) is not executed")
                out.append(self._quote(s[i : j + 1], double))
                i = j + 1
            elif c == "$" and s.startswith("$((", i):
                j, depth = i + 3, 2
                while j < n and depth:
                    depth += {"(": 1, ")": -1}.get(s[j], 0)
                    j += 1
                expr = s[i + 3 : j - 2]
                text = re.sub(rf"\$?\{{?({_NAME})\}}?", lambda mm: self.lookup(mm.group(1), line) or mm.group(0), expr)
                try:
                    out.append(str(_arith(text)))
                except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
                    self.note_once(f"line {line}: $(({expr})) could not be evaluated (unknown variables)")
                    out.append(self._quote(f"$(({expr}))", double))
                i = j
            elif c == "$" and s.startswith("$(", i):
                j, depth = i + 2, 1
                while j < n and depth:
                    depth += {"(": 1, ")": -1}.get(s[j], 0)
                    j += 1
                self.note_once(f"line {line}: {s[i:j]} (command substitution) is not executed")
                out.append(self._quote(s[i:j], double))
                i = j
            elif c == "$" and s.startswith("${", i):
                j, depth = i + 2, 1
                while j < n and depth:
                    depth += {"{": 1, "}": -1}.get(s[j], 0)
                    j += 1
                out.append(self._param(s[i + 2 : j - 1], line, double))
                i = j
            elif c == "$" and i + 1 < n and (s[i + 1].isalnum() or s[i + 1] in "_@*#"):
                m = re.match(rf"{_NAME}|\d|[@*#]", s[i + 1 :])
                out.append(self._param(m.group(0), line, double))
                i += 1 + len(m.group(0))
            else:
                out.append(c)
                i += 1
        return "".join(out)

    # -- lines --------------------------------------------------------------------------------------
    @staticmethod
    def _strip_comment(line: str) -> str:
        single = double = False
        prev = " "
        for i, c in enumerate(line):
            if c == "'" and not double and prev != "\\":
                single = not single
            elif c == '"' and not single and prev != "\\":
                double = not double
            elif c == "#" and not single and not double and prev in " \t;(":
                return line[:i]
            prev = c
        return line

    def logical_lines(self) -> list[tuple[str, int, list[tuple[str, int]]]]:
        """Physical lines joined across continuations and open array parentheses, comments removed:
        (text, first line, [(piece, its line)])."""
        out: list[tuple[str, int, list[tuple[str, int]]]] = []
        buf, start, pieces = "", 0, []
        for n, raw in enumerate(self.text.splitlines(), 1):
            line = self._strip_comment(raw).rstrip()
            if not buf:
                start, pieces = n, []
            cont = line.endswith("\\") and not line.endswith("\\\\")
            piece = line[:-1] if cont else line
            buf += (" " if buf else "") + piece
            pieces.append((piece, n))
            if cont or self._paren_depth(buf) > 0:
                continue
            if buf.strip():
                out.append((buf, start, pieces))
            buf = ""
        if buf.strip():
            out.append((buf, start, pieces))
        return out

    @staticmethod
    def _paren_depth(s: str) -> int:
        """Open array parentheses of ``NAME=(`` not yet closed (quotes respected)."""
        if not re.search(rf"(^|\s){_NAME}\+?=\(", s):
            return 0
        single = double = False
        depth = 0
        for c in s:
            if c == "'" and not double:
                single = not single
            elif c == '"' and not single:
                double = not double
            elif not single and not double:
                depth += {"(": 1, ")": -1}.get(c, 0)
        return depth

    def tokens(self, text: str, line: int) -> list[str]:
        lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
        lex.whitespace_split = True
        lex.commenters = ""
        try:
            return list(lex)
        except ValueError as exc:
            raise ConfigImportError(f"{self.path}: line {line}: {exc} (unbalanced quotes)") from None

    # -- statements ---------------------------------------------------------------------------------
    def run(self) -> Launch:
        stack: list[list[bool]] = []  # per open if: [this branch active, a branch already taken]
        bare: list[Word] = []
        commands: list[tuple[list[Word], int]] = []
        for text, line, pieces in self.logical_lines():
            arr = re.match(
                rf"^\s*(?:export\s+|local\s+|declare\s+(?:-a\s+)?)?({_NAME})(\+?)=\((.*)\)\s*;?\s*$", text, re.S
            )
            if arr:
                if all(a for a, _ in stack):
                    items = self.split(self.expand(arr.group(3), line), line)
                    for piece, n in pieces:  # the line each item was written on
                        for w in self._piece_words(piece, n):
                            self.item_lines.setdefault(w, n)
                    old = self.vars.get(arr.group(1)) if arr.group(2) else None
                    self.vars[arr.group(1)] = (list(old) if isinstance(old, list) else []) + items
                continue
            for wstmt in self._statements(text, line, pieces):
                stmt = [w.text for w in wstmt]
                head = stmt[0]
                if head in ("if", "elif"):
                    cond = [w for w in stmt[1:] if w not in (";", "then")]
                    value = self._test(cond, line)
                    if head == "if":
                        parent = all(a for a, _ in stack)
                        stack.append([parent and value, value])
                    elif stack:
                        parent = all(a for a, _ in stack[:-1])
                        stack[-1] = [parent and not stack[-1][1] and value, stack[-1][1] or value]
                    continue
                if head == "else" and stack:
                    parent = all(a for a, _ in stack[:-1])
                    stack[-1] = [parent and not stack[-1][1], True]
                    rest = stmt[1:]
                    if not rest:
                        continue
                    stmt, wstmt = rest, wstmt[1:]
                    head = stmt[0]
                if head == "fi":
                    if stack:
                        stack.pop()
                    continue
                if head in KEYWORDS_SKIP or head.startswith("#!"):
                    stmt, wstmt = stmt[1:], wstmt[1:]
                    if not stmt:
                        continue
                    head = stmt[0]
                if head in ("for", "while", "until", "case"):
                    self.note_once(f"line {line}: a {head} loop is read once, in order, without repeating it")
                    continue
                if not all(a for a, _ in stack):
                    continue
                self._statement(wstmt, line, bare, commands)
        return self._finish(bare, commands)

    def _piece_words(self, piece: str, n: int) -> list[str]:
        try:
            return self.tokens(self.expand(piece, n), n)
        except ConfigImportError:
            return []

    def _words(self, text: str, line: int, pieces: list[tuple[str, int]]) -> list[Word]:
        """The words of a logical line, each with its physical line (the first line when a quote spans lines)."""
        out: list[Word] = []
        try:
            for piece, n in pieces:
                out += [
                    Word(w, self.item_lines.get(w, n) if "[@]" in piece or "[*]" in piece else n)
                    for w in self.tokens(self.expand(piece, n), n)
                ]
            return out
        except ConfigImportError:
            return [Word(w, line) for w in self.tokens(self.expand(text, line), line)]

    def _statements(self, text: str, line: int, pieces: list[tuple[str, int]]) -> list[list[Word]]:
        """The logical line split into simple commands (the first of a pipeline; redirections dropped),
        each word expanded; ``if``/``then`` etc. are words of their own statements."""
        words = self._words(text, line, pieces)
        out: list[list[Word]] = [[]]
        skip_pipe = False
        i = 0
        while i < len(words):
            w = words[i].text
            if w in (";", "&&", "||", "&", ";;"):
                out.append([])
                skip_pipe = False
            elif w in ("|", "|&"):
                skip_pipe = True
            elif w and set(w) <= set("<>&"):
                i += 1  # a redirection: drop its target
                if out[-1] and out[-1][-1].text.isdigit():
                    out[-1].pop()
            elif not skip_pipe:
                if len(out[-1]) == 1 and out[-1][0].text in ("then", "do", "else"):
                    out.append([])
                out[-1].append(words[i])
            i += 1
        return [s for s in out if s]

    def _test(self, cond: list[str], line: int) -> bool:
        c = [w for w in cond if w not in ("[", "]", "[[", "]]", "test")]
        try:
            if len(c) == 3 and c[1] in ("=", "==", "!="):
                return (c[0] == c[2]) == (c[1] != "!=")
            if len(c) == 3 and c[1] in ("-eq", "-ne", "-gt", "-lt", "-ge", "-le"):
                a, b = int(c[0]), int(c[2])
                return {"-eq": a == b, "-ne": a != b, "-gt": a > b, "-lt": a < b, "-ge": a >= b, "-le": a <= b}[c[1]]
            if len(c) == 2 and c[0] in ("-z", "-n"):
                return (c[1] == "") == (c[0] == "-z")
            if len(c) == 1:
                return c[0] != "" and "${" not in c[0]
        except ValueError:
            pass
        self.note_once(
            f"line {line}: the condition `{' '.join(cond)}` cannot be decided from the file: its first branch is read"
        )
        return True

    def _statement(self, wstmt: list[Word], line: int, bare: list[Word], commands: list) -> None:
        stmt = [w.text for w in wstmt]
        i = 0
        if stmt[0] in ("export", "readonly", "local", "declare", "typeset"):
            i = 1
            while i < len(stmt) and stmt[i].startswith("-"):
                i += 1
            for w in stmt[i:]:
                m = ASSIGN.match(w)
                if m:
                    self._assign(m, line)
            return
        while i < len(stmt) and ASSIGN.match(stmt[i]):
            i += 1
        if i == len(stmt):  # assignments only
            for w in stmt:
                self._assign(ASSIGN.match(w), line)
            return
        head = stmt[i]
        if head in NON_LAUNCH:
            return
        if head.startswith(("-", "+", "~")) or re.match(r"^[+~]*[A-Za-z_][\w.\-/]*(\[[^\]]*\])?=", head):
            bare.extend(wstmt[i:])  # a bare override or flag line (no launch command)
            return
        commands.append((wstmt[i:], line))

    def _assign(self, m: re.Match, line: int) -> None:
        name, plus, value = m.group(1), m.group(2), m.group(3)
        old = self.lookup(name, line) if plus else ""
        self.vars[name] = (old or "") + value

    # -- the launch command -------------------------------------------------------------------------
    def _finish(self, bare: list[Word], commands: list) -> Launch:
        out = self.out
        launches = []
        for words, line in commands:
            parsed = self._parse_command(words)
            if parsed is None:
                out.others.append((" ".join(w.text for w in words), words[0].line if words else line))
            else:
                launches.append(parsed)
        if launches:
            launchers, launcher_args, entry, args = launches[-1]
            if len(launches) > 1:
                out.notes.append(
                    f"{len(launches)} launch commands in the file: the last one (line {args[0].line if args else entry[1]}) "
                    "is read"
                )
            out.entry, out.entry_line = entry
            out.launchers, out.launcher_args = launchers, launcher_args
            out.args = args + bare
        else:
            out.args = bare
        out.env = {k: (v if isinstance(v, str) else " ".join(v)) for k, v in self.vars.items()}
        return out

    def _parse_command(self, words: list[Word]):
        launchers: list[str] = []
        largs: dict[str, list[str]] = {}
        i = 0

        def skip_opts(kind: str) -> None:
            nonlocal i
            start = i
            while i < len(words) and words[i].text.startswith("-") and words[i].text not in ("--", "-m"):
                t = words[i].text
                i += 1 if ("=" in t or t in _BOOL_OPTS.get(kind, ())) else 2
            largs[kind] = [w.text for w in words[start:i]]

        while i < len(words):
            t = words[i].text
            base = t.rsplit("/", 1)[-1]
            if base in ("nohup", "exec", "time", "env", "stdbuf"):
                i += 1
                while i < len(words) and (ASSIGN.match(words[i].text) or words[i].text.startswith("-")):
                    i += 1
            elif base == "ray" and i + 2 < len(words) and words[i + 1].text == "job" and words[i + 2].text == "submit":
                j = next((k for k in range(i + 3, len(words)) if words[k].text == "--"), None)
                if j is None:
                    return None
                launchers.append("ray job submit")
                largs["ray job submit"] = [w.text for w in words[i + 3 : j]]
                i = j + 1
            elif base == "uv" and i + 1 < len(words) and words[i + 1].text == "run":
                launchers.append("uv run")
                i += 2
                skip_opts("uv")
            elif base in ("torchrun", "deepspeed", "srun"):
                launchers.append(base)
                i += 1
                skip_opts(base)
            elif base == "accelerate" and i + 1 < len(words) and words[i + 1].text == "launch":
                launchers.append("accelerate launch")
                i += 2
                skip_opts("accelerate")
            elif base == "python" or PYTHON.match(t):
                launchers.append("python")
                i += 1
                while i < len(words) and words[i].text.startswith("-") and words[i].text != "-m":
                    i += 2 if words[i].text in ("-X", "-W") else 1
                if i < len(words) and words[i].text == "-m":
                    if i + 1 >= len(words):
                        return None
                    return launchers, largs, (words[i + 1].text, words[i + 1].line), words[i + 2 :]
                if i < len(words):
                    return launchers, largs, (words[i].text, words[i].line), words[i + 1 :]
                return None
            elif i < len(words) and words[i].text in ("-m", "--module") and launchers:
                return launchers, largs, (words[i + 1].text, words[i + 1].line), words[i + 2 :]
            elif launchers and (t.endswith(".py") or launchers[-1] in ("torchrun", "deepspeed", "accelerate launch")):
                return launchers, largs, (t, words[i].line), words[i + 1 :]
            else:
                # a console script (trl, rl, sft, openrlhf entry points): name and sub-command
                if base in NON_LAUNCH or base in ("bash", "sh", "ray"):
                    return None
                if launchers or base in CONSOLE_SCRIPTS:
                    sub = 2 if base in ("trl",) and i + 1 < len(words) and not words[i + 1].text.startswith("-") else 1
                    name = " ".join(w.text for w in words[i : i + sub])
                    return launchers, largs, (name, words[i].line), words[i + sub :]
                return None
        return None


#: console scripts the frameworks install (``trl grpo``, prime-rl's ``rl``/``trainer``/``orchestrator``)
CONSOLE_SCRIPTS = {"trl", "rl", "trainer", "orchestrator", "inference", "sft", "verl"}


def read_launch(path: str, text: str) -> Launch:
    """The launch script ``text`` read (module docstring); nothing is executed."""
    return _Reader(path, text).run()


def looks_like_shell(text: str) -> bool:
    """A launch script rather than a plain override or flag list: a shebang, ``set -x``, an assignment
    of a shell variable, a line continuation into a launcher, or a launcher word."""
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith("#") and not s.startswith("#!"):
            continue
        if s.startswith("#!") or re.match(r"^(set|export)\s", s) or re.match(rf"^{_NAME}=", s):
            return True
        first = s.split(maxsplit=1)[0]
        if PYTHON.match(first) or first in (
            "torchrun",
            "ray",
            "uv",
            "accelerate",
            "deepspeed",
            "srun",
            "nohup",
            "bash",
            "if",
        ):
            return True
    return False


__all__ = ["Launch", "Word", "looks_like_shell", "read_launch"]
