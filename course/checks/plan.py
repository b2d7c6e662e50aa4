"""Checks for notebook 11's third exercise (the tile's shape: how many inputs a tile of W1 holds on a given GPU)."""
import numpy as np

from course.checks.core import call, exercise, fail, plain
from course.fused import CH, CHUNK, SMEM_STATIC, TJ, block_smem

H200_SMS = 132   # notebook 11's GPU (course.info() in its saved run; an H100 or H200, 132 SMs each): the kernel's TK
T4_SMS = 40      # fused-t4grid-h200.json: the grid a T4 co-schedules, where the tiles are not kept
SM_COUNTS = ((114, "an H100 PCIe"), (108, "an A100"), (128, "an RTX 4090"), (58, "an L4"))   # other GPUs' SMs


def cdiv(a, b):
    """a / b rounded up."""
    return -(-a // b)


def tile_inputs_ref(sms, inputs, hidden, batch):
    """The smallest multiple of CH whose tiles (of TJ hidden units) each get one of `sms` blocks within SMEM_STATIC
    bytes of shared memory, or None."""
    rows = sms // cdiv(hidden, TJ)
    if rows == 0:
        return None
    tk = cdiv(cdiv(inputs, rows), CH) * CH
    return tk if block_smem(tk, batch) <= SMEM_STATIC else None


def _tiles_said(tk, inputs, hidden):
    """The tiles of `tk` inputs, in words: rows x across = tiles."""
    rows, across = cdiv(inputs, tk), cdiv(hidden, TJ)
    note = (f" (hidden = {hidden} is not a multiple of TJ: the last column is narrower, still a tile)"
            if hidden % TJ else "")
    return f"{rows} rows of tiles x {across} across{note} = {rows * across} tiles"


def _why_none(sms, inputs, hidden, batch):
    """Why no tile keeps a block of its own, in words."""
    across = cdiv(hidden, TJ)
    if sms < across:
        return f"{across} tiles across the {hidden} hidden units already outnumber the {sms} blocks"
    rows = sms // across
    tk = cdiv(cdiv(inputs, rows), CH) * CH
    return (f"{sms} blocks leave room for {rows} rows of {across} across; the shortest tile that fits them, {tk} "
            f"inputs, needs block_smem({tk}, {batch}) = {block_smem(tk, batch):,} bytes, over SMEM_STATIC "
            f"({SMEM_STATIC:,}), and a taller tile needs more")


def _wrong(got, want, sms, inputs, hidden, batch):
    """What is wrong with the tile height `got` (an int), in words."""
    if got <= 0 or got % CH:
        return (f"tk = {got} is not a positive multiple of CH = {CH}: a tile's rows would not start on 16-byte "
                "boundaries")
    if cdiv(inputs, got) * cdiv(hidden, TJ) > sms:
        return (f"tiles of {got} inputs make {_tiles_said(got, inputs, hidden)} for {sms} blocks: some block would "
                "own two")
    if block_smem(got, batch) > SMEM_STATIC:
        return (f"a block with tiles of {got} inputs and batches of {batch} rows declares block_smem({got}, {batch}) = "
                f"{block_smem(got, batch):,} bytes, over SMEM_STATIC ({SMEM_STATIC:,})")
    return (f"tiles of {want} inputs are shorter and also keep: {_tiles_said(want, inputs, hidden)} for {sms} blocks, "
            f"block_smem({want}, {batch}) = {block_smem(want, batch):,} bytes; a shorter tile is less work for the "
            "slowest block")


KINDS = ("kept, a tile in whole chunks", "kept, the chunks rounding up", "over SMEM_STATIC", "too wide for the grid")


def _kind(sms, inputs, hidden, batch):
    """Which limit decides this case: one of KINDS."""
    rows = sms // cdiv(hidden, TJ)
    if rows == 0:
        return KINDS[3]
    if tile_inputs_ref(sms, inputs, hidden, batch) is None:
        return KINDS[2]
    return KINDS[0] if cdiv(inputs, rows) % CH == 0 else KINDS[1]


def _random_case(rng, kind):
    """(sms, inputs, hidden, batch): 1 to 264 SMs, 1 to 4,000 inputs, 1 to 1,024 hidden units (a quarter of the
    draws at most 64), batches of 1 to 256 rows, drawn until `kind` decides it."""
    while True:
        hidden = int(rng.integers(1, 65 if rng.random() < 0.25 else 1025))
        case = (int(rng.integers(1, 265)), int(rng.integers(1, 4001)), hidden, int(rng.integers(1, 257)))
        if _kind(*case) == kind:
            return case


def _cases(rng):
    """(sms, inputs, hidden, batch, what): the course's GPUs, other GPUs, each limit binding in turn, random."""
    cases = [(H200_SMS, 784, 128, CHUNK, "notebook 11's H200: the kernel's TK"),
             (T4_SMS, 784, 128, CHUNK, "a T4's grid (fused-t4grid-h200.json): the tiles not kept")]
    for sms, gpu in SM_COUNTS:
        cases += [(sms, 784, 128, CHUNK, f"{gpu}'s {sms} SMs"), (sms, 784, 128, 32, f"{gpu}'s {sms} SMs, batch 32")]
    cases += [(132, 784, 64, CHUNK, "hidden 64: 8 tiles across"),
              (132, 784, 100, CHUNK, "hidden 100: the last column of tiles narrower"),
              (12, 784, 100, 16, "hidden 100 on 12 SMs: 13 tiles across, more than the blocks"),
              (3, 1620, 8, 6, "block_smem exactly SMEM_STATIC (540 inputs, batch 6)"),
              (3, 1621, 8, 6, "one chunk over SMEM_STATIC (544 inputs, batch 6)"),
              (264, 100, 8, 8, "more blocks than chunks of inputs: the shortest tile"),
              (1, 3, 8, 1, "one SM, three inputs")]
    for kind in KINDS * 10:
        cases.append(_random_case(rng, kind) + (f"random: {kind}",))
    return cases


@exercise("11.3", nudges=(
    "How many tiles does W1 make when a tile holds tk inputs, and how many blocks are there to own them? Count the tiles across the hidden units first: how many rows of tiles does that leave room for?",
    "With that many rows, how few inputs can a tile hold and still cover every input, in whole chunks of CH? A taller tile only takes more shared memory: if the shortest one that fits the grid is over the budget, could any other fit?",
), more="""\
  rows = sms // ((hidden + TJ - 1) // TJ)          # rows of tiles: a block for each tile, the last column narrower
  if rows == 0:
      return None                                   # more tiles across than blocks
  tk = (inputs + rows - 1) // rows                  # the fewest inputs a tile holds, in that many rows
  tk = (tk + CH - 1) // CH * CH                     # in whole 16-byte chunks
  return tk if block_smem(tk, batch) <= SMEM_STATIC else None     # a taller tile needs more, never less""")
def check_tile_inputs(tile_inputs, seed=0):
    """Exercise 11.3. Domain: notebook 11's H200 (132 SMs: the kernel's TK), a T4's grid of fused-t4grid-h200.json
    (40 blocks: the tiles not kept), other GPUs' SM counts at batches 64 and 32, hidden not a multiple of TJ, more
    tiles across than blocks, block_smem exactly SMEM_STATIC and one chunk over, the shortest tile, and 10 random
    cases of each KINDS (a tile in whole chunks, the chunks rounding up, over SMEM_STATIC, too wide for the grid:
    1 to 264 SMs, 1 to 4,000 inputs, 1 to 1,024 hidden units, batches of 1 to 256 rows); a Python int or None."""
    ex = "Exercise 11.3"
    rng = np.random.default_rng(seed)
    cases = _cases(rng)
    for sms, inputs, hidden, batch, what in cases:
        case = f"with sms={sms}, inputs={inputs}, hidden={hidden}, batch={batch} ({what})"
        got = call(ex, case, tile_inputs, sms, inputs, hidden, batch)
        want = tile_inputs_ref(sms, inputs, hidden, batch)
        if got is not None and type(got) is not int:
            fail(ex, case, f"expected a Python int or None, got {type(got).__name__} {plain(got)}",
                 "count with integers: // rounds down and keeps an int, / gives a float")
        if got == want:
            continue
        if got is None:
            fail(ex, case, f"expected {want}, got None: {_tiles_said(want, inputs, hidden)} for {sms} blocks, and "
                 f"block_smem({want}, {batch}) = {block_smem(want, batch):,} bytes is within SMEM_STATIC "
                 f"({SMEM_STATIC:,})", "a block may declare up to SMEM_STATIC bytes, that many included"
                 if block_smem(want, batch) == SMEM_STATIC else "the shortest tile that gives every tile a block "
                 "of its own needs the least shared memory: is that the one your function tried?")
        if want is None:
            fail(ex, case, f"expected None, got {got}: {_wrong(got, want, sms, inputs, hidden, batch)}",
                 f"no tile keeps here: {_why_none(sms, inputs, hidden, batch)}")
        fail(ex, case, f"expected {want}, got {got}: {_wrong(got, want, sms, inputs, hidden, batch)}",
             "every tile needs a block of its own and room in shared memory; among the tiles that have both, "
             "the shortest does the least work")
    return f"{len(cases)} GPUs and layers (the course's H200 and a T4's grid, other GPUs, each limit binding, random)"
