"""Checks for notebook 12's exercise 12.3: where a step's grid barriers go, from which buffers each phase reads and
writes across blocks. Plain Python: no GPU, no kernel."""
import copy
import itertools

import numpy as np

from course.checks.core import call, exercise, fail

BUFFERS = ("Z", "H", "dZ2", "dH", "W1", "b1", "W2", "b2", "the batch", "L0", "L1", "L2")  # random lists' names


def _kernel_late():
    """course.fused's epoch kernel: the small layer of step i - 1 in the spare blocks beside phase A (notebook 11's
    plan). A block's own tile of W1, and X's tile it stages, are its alone: not listed."""
    return [("A: Z += X W1, tile by tile | the small layer of the step before", {"the batch", "H", "dZ2", "dH"},
             {"Z", "W2", "b1", "b2"}),
            ("B: a batch row a block (H, softmax, dZ2, dH; Z back to zero)", {"the batch", "Z", "W2", "b1", "b2"},
             {"Z", "H", "dZ2", "dH"}),
            ("C: W1's tiles", {"dH"}, set())]


def _kernel_small_in_c():
    """The kernel before the small layer moved a phase late (fused-history.md, step 3): W2, b1, b2 updated in C."""
    return [("A: Z += X W1, tile by tile", {"the batch"}, {"Z"}),
            ("B: a batch row a block (H, softmax, dZ2, dH; Z back to zero)", {"the batch", "Z", "W2", "b1", "b2"},
             {"Z", "H", "dZ2", "dH"}),
            ("C: W1's tiles, and the small layer", {"H", "dZ2", "dH"}, {"W2", "b1", "b2"})]


def _kernel_tma():
    """The epoch kernel with the TMA over two steps: in phase B the blocks without a row gather the next batch's X
    into Xt's copy (i + 1) % 2, which phase C's bulk copies read."""
    out = []
    for i in range(2):
        (a, ra, wa), (b, rb, wb), (c, rc, wc) = _kernel_late()
        xt = f"Xt{(i + 1) % 2}"
        out += [(f"step {i}, {a}", ra, wa), (f"step {i}, {b} | gather the next X into {xt}", rb, wb | {xt}),
                (f"step {i}, {c} | bulk copies from {xt}", rc | {xt}, wc)]
    return out


def _logits_rotating(copies):
    """fused_bytes.py and fused_column.py (fused-history.md, "one barrier a step"): each block adds its hidden
    units' share of the logits into L[i % copies], then, after the barrier, every block reads the whole logits
    (the softmax, dZ2, its own units' gradients and SGD) and zeroes L[(i - 1) % copies], read the step before. The list
    spans `copies` steps. H and Z stay within a block (fused_bytes) or a column of tiles that counts in by itself
    (fused_column): not listed."""
    out = []
    for i in range(copies):
        out += [(f"step {i}: a hidden unit's column of H, its share of the logits added into L{i % copies}",
                 {"the batch"}, {f"L{i % copies}"}),
                (f"step {i}: every block the softmax of every row from L{i % copies}, its units' SGD; "
                 f"L{(i - 1) % copies} zeroed", {"the batch", f"L{i % copies}"}, {f"L{(i - 1) % copies}"})]
    return out


def _fused_one():
    """fused_one.py (fused-history.md, "one barrier a step: phase B for all rows in every block"): phase A adds into
    Z's copy i % 3; after the barrier every block does phase B for the whole batch from it, reads the small layer's
    copy i % 2, writes its units' share of copy (i + 1) % 2 and zeroes Z's copy (i + 2) % 3. Six steps."""
    out = []
    for i in range(6):
        now, nxt = f"{i % 2}", f"{(i + 1) % 2}"
        out += [(f"step {i}: A into Z{i % 3}", {"the batch"}, {f"Z{i % 3}"}),
                (f"step {i}: B for every row in every block, from Z{i % 3} and the small layer's copy {now}",
                 {"the batch", f"Z{i % 3}", "W2" + now, "b1" + now, "b2" + now},
                 {"W2" + nxt, "b1" + nxt, "b2" + nxt, f"Z{(i + 2) % 3}"})]
    return out


def clashes(phases):
    """[(p, q, buffer, kind)] for each ordered pair of positions whose phases clash, p's access first: kind "write,
    read", "read, write" or "write, write" (q <= p: q of the next step)."""
    out = []
    for p, (_, rp, wp) in enumerate(phases):
        for q, (_, rq, wq) in enumerate(phases):
            for kind, mine, theirs in (("write, read", wp, rq), ("read, write", rp, wq), ("write, write", wp, wq)):
                out += [(p, q, buf, kind) for buf in sorted(mine & theirs)]
    return out


def span(p, q, n):
    """The positions k (a barrier after phase k) between phase p and the next phase q: q of the next step if q <= p."""
    return {(p + d) % n for d in range((q - p) % n or n)}


def barriers_ref(phases):
    """The fewest positions that put a barrier between every clash (clashes), the smallest such list in order."""
    n = len(phases)
    spans = [span(p, q, n) for p, q, _, _ in clashes(phases)]
    for count in range(n + 1):
        for cut in itertools.combinations(range(n), count):
            if all(s & set(cut) for s in spans):
                return list(cut)


def _random_phases(rng, kind):
    """A random list of 1 to 7 phases over BUFFERS: "any" (each buffer read with probability 1/4, written 1/8),
    "reads only" (no phase writes: no barrier), "own buffers" (each buffer touched by one phase only: one barrier
    if any phase writes), "one phase"."""
    n = 1 if kind == "one phase" else int(rng.integers(2, 8))
    phases = []
    for k in range(n):
        reads = {b for b in BUFFERS if rng.random() < 0.25}
        writes = set() if kind == "reads only" else {b for b in BUFFERS if rng.random() < 0.125}
        if kind == "one phase":
            writes |= {str(rng.choice(BUFFERS))}
        phases.append([f"phase {k}", reads, writes])
    if kind == "own buffers":
        owner = {b: int(rng.integers(n)) for b in BUFFERS}
        for k, phase in enumerate(phases):
            phase[1] = {b for b in phase[1] if owner[b] == k} | {f"B{k}"}
            phase[2] = {b for b in phase[2] if owner[b] == k}
        phases[int(rng.integers(n))][2].add(f"B{n}")
    return [tuple(p) for p in phases]


def _cases(rng):
    """(what, phases): the course's kernel and its history, the designs of one barrier a step, random lists."""
    cases = [("the epoch kernel's phases (the small layer a phase late)", _kernel_late()),
             ("the kernel with the small layer in phase C", _kernel_small_in_c()),
             ("the epoch kernel with the TMA, two steps (Xt0, Xt1)", _kernel_tma()),
             ("one barrier a step: the logits rotating over 3 copies, three steps (fused_bytes.py, "
              "fused_column.py)",
              _logits_rotating(3)),
             ("the same with 2 copies of the logits, two steps", _logits_rotating(2)),
             ("one barrier a step: phase B in every block, Z over 3 copies, the small layer over 2, six steps "
              "(fused_one.py)", _fused_one())]
    for kind in ("any", "reads only", "own buffers", "one phase"):
        for k in range({"any": 24, "reads only": 2, "own buffers": 4, "one phase": 3}[kind]):
            cases.append((f"a random list ({kind}, {k + 1})", _random_phases(rng, kind)))
    return cases


def _show(phases):
    """The phases as the check's message lists them: position, name, reads, writes."""
    return "".join(f"\n    {k}: {name!r} reads {sorted(r)}, writes {sorted(w)}" for k, (name, r, w) in
                   enumerate(phases))


def _label(phases, k, when=None):
    """'phase k', with its name (unless it is just that) and `when`, in brackets."""
    said = [repr(phases[k][0])] if phases[k][0] != f"phase {k}" else []
    return f"phase {k}" + (f" ({', '.join(said + [when] if when else said)})" if said or when else "")


def _unseparated(phases, got):
    """The first clash that no barrier of `got` separates, as a sentence, and a hint naming what was missed."""
    n = len(phases)
    for p, q, buf, kind in clashes(phases):
        if span(p, q, n) & set(got):
            continue
        when = ("the same phase of the next step" if p == q else "in the next step" if q < p else "later in the step")
        a, b = kind.split(", ")
        msg = (f"{_label(phases, p)} {a}s {buf}, then {_label(phases, q, when)} {b}s it, and no barrier of yours "
               "falls between them")
        if kind == "read, write":
            hint = (f"a block may overwrite {buf} while another still reads it: a barrier keeps a write after the "
                    "reads before it, not only a read after a write")
        elif kind == "write, write":
            hint = f"both write {buf}: without a barrier between them, which write is left is a matter of timing"
        else:
            hint = f"a block may read {buf} before another block has written it"
        if p == q:
            hint += ("; a phase that writes a buffer its own blocks touch meets itself in the next step: some "
                     "barrier must come round before it")
        elif q < p:
            hint += ("; the steps repeat in one launch: after the last phase comes the next step's first, and a "
                     "block may be there while another is still in the last")
        return msg, hint
    return None


def _fail(ex, case, phases, msg, hint):
    """fail, with the case's phases listed under the message."""
    __tracebackhide__ = True
    fail(ex, case, f"{msg}; the phases:{_show(phases)}", hint)


@exercise("12.3", nudges=(
    "A barrier orders everything every block did before it against everything after it. Which orders of two accesses to one buffer, by different blocks, can go wrong: a write then a read, a read then a write, two writes?",
    "The steps repeat: when phase q comes before phase p in the list, which run of q meets p's writes first? For one clash, at which positions could a barrier go, and does the clash need one in each direction? How few positions serve every clash, and could you afford to try every set of positions, the smallest first?",
), more="""\
  from itertools import combinations
  n = len(phases)
  spans = []                                                   # where a barrier may go, one set per clash
  for p in range(n):
      for q in range(n):
          _, reads_p, writes_p = phases[p]
          _, reads_q, writes_q = phases[q]
          if writes_p & (reads_q | writes_q) or reads_p & writes_q:           # p, then q, in other blocks
              spans.append({(p + d) % n for d in range((q - p) % n or n)})   # after p ... before q (next step's)
  for count in range(n + 1):                                   # the fewest first
      for cut in combinations(range(n), count):
          if all(s & set(cut) for s in spans):
              return list(cut)""")
def check_barriers_needed(barriers_needed, seed=0):
    """Exercise 12.3. Domain: the course's epoch kernel (the small layer a phase late, and in phase C; with the
    TMA's Xt over two steps), the kernels of one barrier a step in notebooks/results/fused-history.md (logits over
    3 copies, over 2; fused_one.py's Z over 3 copies and small layer over 2, six steps), and random lists of 1 to 7
    phases over 12 buffers (any, reads only, each buffer in one phase, one phase); the phases left unchanged; any
    sorted list of positions with the fewest barriers."""
    ex = "Exercise 12.3"
    rng = np.random.default_rng(seed)
    cases = _cases(rng)
    for what, phases in cases:
        case = f"with {what}"
        given = copy.deepcopy(phases)
        got = call(ex, case, barriers_needed, given)
        if given != phases:
            _fail(ex, case, phases, "your function changed the phases",
                  "read the sets, do not write them (a |= b changes a)")
        want, n = barriers_ref(phases), len(phases)
        if not isinstance(got, (list, tuple)) or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                                                         for k in got):
            _fail(ex, case, phases, f"expected a list of positions (ints), got {type(got).__name__} {got!r}",
                  "return where the barriers go (each k: a barrier after phase k), not how many")
        got = [int(k) for k in got]
        if any(not 0 <= k < n for k in got):
            _fail(ex, case, phases, f"positions run from 0 to {n - 1}, got {got}",
                  "k is the index of the phase a barrier follows")
        if got != sorted(set(got)):
            _fail(ex, case, phases, f"expected the positions sorted, each once, got {got}", "sort them")
        missed = _unseparated(phases, got)
        if missed:
            _fail(ex, case, phases, f"{missed[0]} (your barriers: after {got}; {len(want)} suffice, e.g. after "
                  f"{want})", missed[1])
        if len(got) > len(want):
            _fail(ex, case, phases, f"{len(got)} barriers (after {got}) where {len(want)} suffice: after {want}",
                  "a barrier costs every block a wait: one where the spans of several clashes overlap serves them all")
    return (f"{len(cases)} lists of phases (the epoch kernel, the one-barrier kernels of fused-history.md, random "
            "ones)")
