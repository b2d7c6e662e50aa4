"""Checks for notebook 07's exercises: the combine kernel, the projection onto a plane, filter normalization."""
from math import prod

import numpy as np

import course
from course.checks.core import MAX_THREADS, call, exercise, fail, on_a_gpu, run_cases
from course.runtime.util import cdiv

ATOL, RTOL = 1e-6, 1e-5  # float32: two products and two sums per element; a GPU fuses them into FMAs


@exercise("7.1", nudges=(
    "A point of the plane: theta plus a times d1 plus b times d2. Which coefficient goes with which "
    "direction?",
    "theta, d1 and d2 are only read; one thread per element, with a guard.",
), more="""\
  i = cuda.grid(1)
  if i < out.size:
      out[i] = theta[i] + a * d1[i] + b * d2[i]     # a with d1, b with d2; theta, d1, d2 only read""")
def check_combine_kernel(kernel, seed=0):
    """Exercise 7.1. Domain: out[i] = theta[i] + a*d1[i] + b*d2[i] for odd and whole-block sizes (7 to 100,003 on a
    GPU, 301 and 256 in the simulator), three block shapes and the largest, a spare block; a and b of both signs,
    and a = 0 or b = 0 (the lines every plot grid crosses: an answer that divides by one fails); theta, d1 and d2
    must come back unchanged; several launches in one process."""
    rng = np.random.default_rng(seed)
    cases = []
    for n, block, spare, zero in ((course.pick(100_003, 301), 128, 0, ""), (97, 32, 0, "a"), (7, 64, 1, ""),
                                  *on_a_gpu((1_000, MAX_THREADS, 0, "")),
                                  (course.pick(101_770 // 10 * 128, 256), 128, 0, ""), (64, 32, 0, "b")):  # whole
        theta, d1, d2 = (rng.standard_normal(n).astype(np.float32) for _ in range(3))   # (n,) each
        a = np.float32(rng.uniform(0.3, 2.0) * rng.choice([-1, 1]))
        b = np.float32(rng.uniform(0.3, 2.0) * rng.choice([-1, 1]))
        while abs(abs(a) - abs(b)) < 0.2:                  # a and b clearly different: a swap must show
            b = np.float32(rng.uniform(0.3, 2.0) * rng.choice([-1, 1]))
        a, b = (np.float32(0) if zero == "a" else a), (np.float32(0) if zero == "b" else b)   # a grid's axes
        want = (theta.astype(np.float64) + float(a) * d1 + float(b) * d2).astype(np.float32)
        cases.append(dict(name=f"n={n}, a={a:.3f}, b={b:.3f}", grid=cdiv(n, block) + spare, block=block,
                          inputs=[theta, d1, d2, a, b], expected=want))
    return run_cases("Exercise 7.1", kernel, cases, atol=ATOL, rtol=RTOL,
                     hint="look at the guard (threads past the end), which scalar goes with which direction, "
                          "and that the result goes to out alone: theta, d1 and d2 are only read")


def _project_ref(S, theta_n, d1, d2):
    R = np.asarray(S, np.float64) - np.asarray(theta_n, np.float64)        # (n, P): centred on theta_n
    D = np.stack([d1, d2], axis=1).astype(np.float64)                      # (P, 2)
    return np.linalg.solve(D.T @ D, (R @ D).T).T                           # (n, 2)


@exercise("7.2", nudges=(
    "Centre each snapshot on theta_n first: the plane passes through it. Then the closest point is a least "
    "squares fit with two unknowns per snapshot.",
    "Directions that are neither unit length nor orthogonal need the whole 2 x 2 Gram matrix of d1 and d2 "
    "(the normal equations), in float64. Which column of the result is a (along d1)?",
), more="""\
  R = snapshots - theta_n in float64                    # (n, P): centred on theta_n, a new array
  D = np.stack([d1, d2], axis=1) in float64             # (P, 2)
  G = D.T @ D                                           # (2, 2) Gram matrix
  return np.linalg.solve(G, (R @ D).T).T                # (n, 2): column 0 is a, column 1 is b""")
def check_project_to_plane(project_to_plane, seed=0):
    """Exercise 7.2. Domain: the coordinates (a_i, b_i) of each snapshot's closest point in theta_n + a d1 + b d2,
    for 1 to 40 snapshots of 9 to 301 parameters, directions that are neither unit length nor orthogonal (and
    nearly orthogonal ones), lengths from 0.2 to 5 times each other, theta_n far from the origin, a snapshot equal
    to theta_n (coordinates 0); inputs left unchanged; a float64 (n, 2) array, as the spec says."""
    ex = "Exercise 7.2"
    hint = ("look at the centring (the plane passes through theta_n), at the 2x2 normal equations (directions "
            "that are neither unit length nor orthogonal need the whole Gram matrix), at which column is a "
            "(along d1), and at the dtype: float64 throughout")
    rng = np.random.default_rng(seed)
    for n, P, overlap, scale in ((7, 53, 0.6, (3.0, 0.4)), (course.pick(40, 12), 301, -0.3, (0.2, 5.0)),
                                 (1, 9, 0.0, (1.0, 1.0))):
        d1 = scale[0] * rng.standard_normal(P)
        d2 = scale[1] * (overlap * d1 / scale[0] + rng.standard_normal(P))  # correlated with d1 unless overlap=0
        d1, d2 = d1.astype(np.float32), d2.astype(np.float32)
        theta_n = (3.0 + rng.standard_normal(P)).astype(np.float32)         # far from 0: centring matters
        ab = rng.uniform(-2, 2, (n, 2))
        off = 0.3 * rng.standard_normal((n, P))                             # every snapshot is off the plane
        S = (theta_n + ab[:, :1] * d1 + ab[:, 1:] * d2 + off).astype(np.float32)   # (n, P)
        if n > 1:
            S[-1] = theta_n                                                 # the last snapshot IS theta_n
        want = _project_ref(S, theta_n, d1, d2)
        case = (f"with {n} snapshot(s) of {P} parameters, |d1| = {np.linalg.norm(d1):.2f}, "
                f"|d2| = {np.linalg.norm(d2):.2f}, cos(d1, d2) = "
                f"{d1 @ d2 / np.linalg.norm(d1) / np.linalg.norm(d2):.2f}")
        S_in = S.copy()
        t_in, d1_in, d2_in = theta_n.copy(), d1.copy(), d2.copy()
        got = call(ex, case, project_to_plane, S_in, t_in, d1_in, d2_in)
        if not all(np.array_equal(x, y) for x, y in ((S_in, S), (t_in, theta_n), (d1_in, d1), (d2_in, d2))):
            fail(ex, case, "an input (snapshots, theta_n, d1 or d2) was changed: work on a copy "
                 "(theta_i - theta_n makes one)", hint)
        if not isinstance(got, np.ndarray) or got.dtype != np.float64:
            fail(ex, case, f"expected a float64 NumPy array, got {type(got).__name__} "
                 f"{getattr(got, 'dtype', '')}", "the spec asks for float64: convert the inputs before the "
                 "products (float32 sums over many parameters lose digits)")
        if got.shape != (n, 2):
            fail(ex, case, f"expected an array of shape {(n, 2)} (one row (a, b) per snapshot), got {got.shape}",
                 hint)
        tol = 1e-5 * (1 + np.abs(want))
        wrong = ~(np.abs(got - want) <= tol)
        if wrong.any():
            i, j = (int(k) for k in np.argwhere(wrong)[0])
            what = ""
            if np.allclose(got, _project_ref(S, np.zeros_like(theta_n), d1, d2), rtol=1e-4, atol=1e-4):
                what = " (these are the coordinates of the snapshots themselves, not of theta_i - theta_n)"
            elif np.allclose(got, want[:, ::-1], rtol=1e-4, atol=1e-4):
                what = " (a and b are swapped)"
            fail(ex, case, f"snapshot {i}, coordinate {'ab'[j]}: expected {want[i, j]:.6g}, got {got[i, j]:.6g}"
                 f"{what} ({wrong.sum()} of {wrong.size} wrong)", hint)
    return "3 random cases (non-unit, non-orthogonal and orthogonal directions), float64"


def _layout(shapes, align):
    """(name, shape, offset) per tensor, each start rounded up to a multiple of `align`, like FlatParams."""
    out, offset = [], 0
    for name, shape in shapes.items():
        offset = cdiv(offset, align) * align
        out.append((name, shape, offset))
        offset += prod(shape)
    return tuple(out), offset


def _filter_normalize_ref(d, theta, layout, ignore_bias):
    out = np.zeros_like(d)
    for _, shape, o in layout:
        n = prod(shape)
        if len(shape) == 1:
            out[o:o + n] = 0.0 if ignore_bias else theta[o:o + n]
        else:
            dt = d[o:o + n].reshape(-1, shape[-1]).astype(np.float64)             # (in, out)
            th = theta[o:o + n].reshape(-1, shape[-1]).astype(np.float64)
            out[o:o + n] = (dt * (np.linalg.norm(th, axis=0) / (np.linalg.norm(dt, axis=0) + 1e-10))).ravel()
    return out


@exercise("7.3", nudges=(
    "A filter is a COLUMN of a weight matrix shaped (in, out): the weights that feed one neuron. Each column "
    "of the direction is rescaled to the norm of theta's column.",
    "Biases: zero when ignore_bias, else theta's. The padding between tensors stays 0, d itself is not "
    "modified, and the result is float32, like d.",
), more="""\
  out = np.zeros_like(d)                                # float32, padding 0, d untouched
  for name, shape, o in layout:
      n = prod(shape)
      1-D (a bias): out[o:o+n] = 0 if ignore_bias else theta[o:o+n]
      2-D W (in, out): dW = d[o:o+n].reshape(shape); tW = theta[o:o+n].reshape(shape)
          out[o:o+n] = (dW * (norm(tW, axis=0) / (norm(dW, axis=0) + 1e-10))).ravel()""")
def check_filter_normalize(filter_normalize, seed=0):
    """Exercise 7.3. Domain: layouts padded as FlatParams pads them (aligned to 8, 16 and 64 floats, and
    FlatParams' own, of a 49-20-10 MLP), one packed back to back (no padding), non-square matrices whose columns
    have very different norms, an all-zero column of d (the epsilon keeps it 0, not NaN); inputs whose padding
    holds non-zero numbers (the result's padding must still be 0: nothing copied from d or theta); both settings
    of ignore_bias; d and theta left alone; a float32 result; several calls in one process."""
    ex = "Exercise 7.3"
    hint = ("look at which axis holds a filter (a COLUMN of W (in, out): the weights feeding one neuron), at the "
            "biases (zero or theta's, by ignore_bias), at the padding between tensors (stays 0), at the dtype "
            "(float32, like d) and at d itself (not modified)")
    from course.update import FlatParams
    rng = np.random.default_rng(seed)
    mlp = {"W1": (49, 20), "b1": (20,), "W2": (20, 10), "b2": (10,)}         # a pooled MNIST MLP, by FlatParams
    for shapes, align, ignore_bias in (({"W1": (13, 7), "b1": (7,), "W2": (7, 3), "b2": (3,)}, 8, True),
                                       ({"W1": (5, 11), "b1": (11,), "W2": (11, 4), "b2": (4,)}, 16, False),
                                       ({"W1": (course.pick(784, 49), 9), "b1": (9,), "W2": (9, 10), "b2": (10,)},
                                        64, True),
                                       ({"W1": (6, 5), "b1": (5,), "W2": (5, 3), "b2": (3,)}, 1, False),   # packed
                                       (mlp, None, False)):
        layout, size = _layout(shapes, align) if align else (FlatParams(mlp).layout, FlatParams(mlp).size)
        theta = rng.standard_normal(size).astype(np.float32)   # the padding too: it must not reach the result
        d = rng.standard_normal(size).astype(np.float32)
        for _, shape, o in layout:
            n = prod(shape)
            t = rng.standard_normal(shape)
            if len(shape) == 2:
                t *= 10.0 ** rng.uniform(-1, 1, shape[1])   # columns of very different norms, rows alike
            theta[o:o + n] = t.ravel()
            d[o:o + n] = rng.standard_normal(n)
            if len(shape) == 2 and ignore_bias:              # an all-zero column of d: 0 / (0 + 1e-10) = 0
                d[o:o + n].reshape(shape)[:, shape[1] // 2] = 0
        want = _filter_normalize_ref(d, theta, layout, ignore_bias)
        padding = "packed back to back" if align == 1 else f"FlatParams' padding ({size} floats)"
        case = (f"with layout {', '.join(f'{k} {s}' for k, s in shapes.items())}, {padding}, "
                f"ignore_bias={ignore_bias}{', an all-zero column in d' if ignore_bias else ''}")
        d_in, theta_in = d.copy(), theta.copy()
        got = call(ex, case, filter_normalize, d_in, theta_in, layout) if ignore_bias else \
            call(ex, case, filter_normalize, d_in, theta_in, layout, ignore_bias=False)
        if not (np.array_equal(d_in, d) and np.array_equal(theta_in, theta)):
            fail(ex, case, "the input d (or theta) was changed: return a new array", hint)
        if not isinstance(got, np.ndarray) or got.dtype != np.float32:
            fail(ex, case, f"expected a float32 NumPy array (like d), got {type(got).__name__} "
                 f"{getattr(got, 'dtype', '')}", "the result goes into a float32 FlatParams on the device; "
                 "start from np.zeros_like(d)")
        if got.shape != (size,):
            fail(ex, case, f"expected a flat array of {size} numbers (the layout's size), got shape {got.shape}",
                 hint)
        for name, shape, o in layout:
            n = prod(shape)
            g, w = got[o:o + n].reshape(shape), want[o:o + n].reshape(shape)
            if np.allclose(g, w, rtol=1e-4, atol=1e-6):
                continue
            if np.isnan(g).any():
                j = int(np.argwhere(np.isnan(g))[0][-1])
                zero = ("" if dd_any(d, o, shape, j) else
                        " (d's column is all zeros there: 0 / 0 without the + 1e-10)")
                fail(ex, case, f"column {j} of {name} is NaN{zero}", hint)
            if len(shape) == 1:
                should = "all zeros (ignore_bias=True)" if ignore_bias else "a copy of theta's (ignore_bias=False)"
                fail(ex, case, f"{name} should be {should}, got {np.array2string(g[:4], precision=3)}...", hint)
            th, dd = theta[o:o + n].reshape(shape), d[o:o + n].reshape(shape)
            gn, tn, rn = np.linalg.norm(g, axis=0), np.linalg.norm(th, axis=0), np.linalg.norm(th, axis=1)
            bad = ~np.isclose(gn, tn, rtol=1e-4)
            if not bad.any():                           # the right norms: then the direction is wrong
                cos = np.sum(g * dd, axis=0) / (gn * np.linalg.norm(dd, axis=0) + 1e-30)
                j = int(np.argmin(cos))
                fail(ex, case, f"column {j} of {name} has the right norm but is not parallel to d's column {j} "
                     f"(cosine {cos[j]:.3f}): rescale d's column, do not replace it", hint)
            j = int(np.argmax(bad))
            why = ""
            if np.allclose(np.linalg.norm(g, axis=1), rn, rtol=1e-4):
                why = " (its ROWS have theta's row norms: normalize columns, W is (in, out))"
            elif np.allclose(gn[np.linalg.norm(dd, axis=0) > 0], 1.0, rtol=1e-4):   # d's zero columns stay 0
                why = " (unit columns: multiply by the norm of theta's column too)"
            fail(ex, case, f"column {j} of {name} has norm {gn[j]:.4g}, but theta's column {j} has norm "
                 f"{tn[j]:.4g}{why}", hint)
        pad = np.ones(size, bool)
        for _, shape, o in layout:
            pad[o:o + prod(shape)] = False
        if pad.any() and np.any(got[pad] != 0):
            fail(ex, case, f"the padding between tensors (e.g. index {int(np.argmax(pad & (got != 0)))}) must stay 0",
                 hint)
    return ("5 random layouts (padded, packed, FlatParams'; columns of different norms, an all-zero column; "
            "biases zeroed and kept)")


def dd_any(d, o, shape, j):
    """Whether column j of the tensor of `shape` at offset o of d holds a non-zero number."""
    return bool(np.any(d[o:o + prod(shape)].reshape(shape)[:, j]))
