"""Predict a data-parallel run's images/s from measured parts, before a cluster is spent on it (issue #51).

The model, one worker's step and one collective, each part measured or published:

- A message over a link costs latency + bytes / bandwidth (Hockney's alpha-beta model); `fit_link` fits both from
  messages timed at several sizes.
- The gradients are averaged by a ring allreduce (reduce-scatter then all-gather: Patarasuk & Yuan 2009; Thakur et
  al. 2005), 2 (p - 1) messages of n / p bytes each over the ring's slowest link: within one node the node's link,
  across nodes the network's.
- The backend reduces the gradients in buckets (DDP: 25 MB; Horovod: its fusion buffer, 64 MB) that become ready
  evenly through the backward pass and are reduced one at a time as soon as each is ready; what outlasts the
  backward is the exposed communication (`exposed_communication_s`).
- A worker's step is forward + backward + optimizer + exposed communication, unless its input pipeline delivers
  fewer images a second than that step eats: then the input bounds it.

What the model leaves out is named where a validation row misses (analysis/reference/advisor.toml declares the
tolerance): contention for a node's PCIe or network port among its GPUs, stragglers, the input pipeline at scale.
"""
from __future__ import annotations

import csv
import functools
import json
import math
import re
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1] / "reference"
DECLARATION = REFERENCE / "advisor.toml"
MB = 1024 * 1024
# the share of a step that exposed communication must reach before it, not the compute, is named the bound
COMMUNICATION_BOUND_SHARE = 0.05
# a node added "pays" while it raises the cluster's images/s by at least this share of what one node does alone
NODE_PAYS_SHARE = 0.5


# ---- the inputs, checked in one place -------------------------------------------------------------------------------
# Every number a prediction is made from reaches the model as a Link, a Step or a machine's shape; each is checked
# here, and the readers of link_fit.json and step files only add which file it was and what to do. A zero bandwidth
# would divide by zero, a negative one predict better than real, a string fail deep in the arithmetic.
class InputError(ValueError):
    """An advisor input no prediction can be made from; the message is one line naming it (and, from a reader, its
    file and what to do)."""


def number(name: str, value, least: float = 0.0, strict: bool = True) -> float:
    """`value` as a finite real number above `least` (at least `least` where not strict)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} = {value!r} is not a finite number")
    if value < least or (strict and value == least):
        raise InputError(f"{name} = {value!r} must be {'above' if strict else 'at least'} {least:g}")
    return float(value)


def whole(name: str, value, least: int = 1) -> int:
    """`value` as a whole number of at least `least`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{name} = {value!r} must be a whole number >= {least}")
    return value


def check_machine(gpus_per_node, nodes) -> None:
    """The machine `analysis advise --step` predicts: its GPUs a node and its node counts, each a whole number >= 1
    (-4 GPUs a node would print -16 GPUs and negative images/s)."""
    try:
        whole("--gpus-per-node", gpus_per_node)
        for n in nodes:
            whole("--nodes", n)
    except InputError as e:
        raise InputError(f"{e} (make advise: GPUS_PER_NODE=, the GPUs a node of the machine to predict has; "
                         f"--nodes: its node counts, e.g. 1,2,4)") from None


@dataclass(frozen=True)
class Link:
    """One point-to-point message of n bytes costs latency_s + n / bytes_per_s."""
    latency_s: float
    bytes_per_s: float

    def __post_init__(self):
        number("latency_s", self.latency_s, strict=False)
        number("bytes_per_s", self.bytes_per_s)

    def message_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class Step:
    """One worker's training step at its per-GPU batch, measured on one GPU (or one CPU process)."""
    forward_s: float
    backward_s: float
    optimizer_s: float
    batch: int
    gradient_bytes: int
    input_images_per_s: float | None = None  # the input pipeline's rate for one worker; None: not a bound
    # False where the rank loads its batches itself (data.loader_workers = 0): the input then adds to the step
    # instead of running beside it
    input_overlaps: bool = True
    threads: int = 1  # the CPU threads the step was timed with (a CPU rank's threads)

    def __post_init__(self):
        for name in ("forward_s", "backward_s", "optimizer_s"):
            number(name, getattr(self, name), strict=False)
        number("forward_s + backward_s + optimizer_s", self.compute_s)  # a step of no time: infinite images/s
        whole("batch", self.batch)
        whole("gradient_bytes", self.gradient_bytes, 0)
        whole("threads", self.threads)
        if self.input_images_per_s is not None:
            number("input_images_per_s", self.input_images_per_s)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


@dataclass(frozen=True)
class Prediction:
    ranks: int
    nodes: int
    images_per_s: float
    efficiency: float  # images/s over ranks x the one-rank step's images/s
    bound: str  # "compute", "communication" or "input"
    step_s: float
    exposed_communication_s: float
    backend: str = ""
    ranks_per_node: int = 0  # the placement predicted: ranks a node, a rank's threads
    threads: int = 0


# Where bandwidth rules: the messages within this factor of the largest timed one give the bandwidth (the probe's
# sizes go by fours, so its three largest), and the smallest LATENCY_POINTS give the latency.
BANDWIDTH_SPAN = 16
LATENCY_POINTS = 3


def fit_link(sizes_bytes: list[float], seconds: list[float]) -> Link:
    """Hockney's alpha-beta fitted where each term rules: beta from the largest messages, alpha from the smallest.

    Why not one least-squares line over every size (the first fit, of relative residuals): on a token bucket (the
    local cluster's tc tbf) the small messages ride the bucket's burst at the line's rate, and with them deciding
    the slope the 50 Mbit link fitted at 0.248 Gbit/s (issue 63). So beta is the slope of the least-squares line
    through the messages within BANDWIDTH_SPAN of the largest (at least the two largest sizes): a burst sends the
    same bytes early in each of them, a constant shift that moves the line's intercept and leaves its slope alone,
    which is why that intercept is not taken as the latency. alpha is what the smallest messages cost beyond their
    bytes at beta (their median: one message held up by the machine does not decide it)."""
    points = sorted(zip(sizes_bytes, seconds))
    if len({n for n, _ in points}) < 2:
        raise ValueError("fitting a link needs messages of at least two message sizes")
    slope = bandwidth_slope(points)
    if slope <= 0:
        raise ValueError("the timed messages do not grow with their size: no bandwidth to fit")
    latency = statistics.median(max(0.0, t - n * slope) for n, t in points[:LATENCY_POINTS])
    return Link(latency_s=latency, bytes_per_s=1 / slope)


def bandwidth_slope(points: list[tuple[float, float]]) -> float:
    """Seconds a byte: the least-squares slope through the largest messages (points sorted by size)."""
    largest = points[-1][0]
    top = [(n, t) for n, t in points if n * BANDWIDTH_SPAN >= largest]
    if len({n for n, _ in top}) < 2:  # sizes far apart: the two largest
        top = [p for p in points if p[0] >= sorted({n for n, _ in points})[-2]]
    mean_n, mean_t = statistics.fmean(n for n, _ in top), statistics.fmean(t for _, t in top)
    return (sum((n - mean_n) * (t - mean_t) for n, t in top) / sum((n - mean_n) ** 2 for n, _ in top))


def ring_link(ranks_per_node: int, nodes: int, intra: Link, inter: Link) -> Link:
    """The link a ring over these ranks waits on: every step of a ring waits for its slowest hop."""
    if nodes <= 1:
        return intra
    return Link(latency_s=max(intra.latency_s, inter.latency_s),
                bytes_per_s=min(intra.bytes_per_s, inter.bytes_per_s) if ranks_per_node > 1 else inter.bytes_per_s)


def ring_allreduce_s(nbytes: float, ranks: int, link: Link) -> float:
    """A ring allreduce of nbytes over `ranks`: 2 (p - 1) messages of nbytes / p."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * link.message_s(nbytes / ranks)


def exposed_communication_s(comm_s: float, backward_s: float, buckets: int) -> float:
    """The reduction time that outlasts the backward pass: bucket k (of b) is ready at k / b of the backward and is
    reduced, one at a time, in comm_s / b; the last reduction ends at max(backward + comm_s / b, backward / b +
    comm_s)."""
    if comm_s <= 0:
        return 0.0
    per_bucket = comm_s / buckets
    end = max(backward_s + per_bucket, backward_s / buckets + comm_s)
    return end - backward_s


def buckets_of(backend: str, gradient_bytes: int, bucket_mb: float | None = None) -> int:
    """How many reductions the backend splits the gradients into: DDP's buckets (25 MB by default), Horovod's
    fusion buffer (64 MB)."""
    size = (bucket_mb or {"ddp": 25, "horovod": 64}[backend]) * MB
    return max(1, math.ceil(gradient_bytes / size))


def predict(step: Step, backend: str, ranks: int, ranks_per_node: int, intra: Link, inter: Link,
            bucket_mb: float | None = None, shared_cores: int | None = None) -> Prediction:
    """Images/s of `ranks` workers, `ranks_per_node` a node, each running `step`, reduced by `backend`.
    shared_cores: every node is a host on one machine of that many cores (the local cluster), so the ranks' threads
    beyond them share the cores and the compute stretches in proportion."""
    nodes = math.ceil(ranks / ranks_per_node)
    link = ring_link(min(ranks, ranks_per_node), nodes, intra, inter)
    comm = ring_allreduce_s(step.gradient_bytes, ranks, link)
    exposed = exposed_communication_s(comm, step.backward_s, buckets_of(backend, step.gradient_bytes, bucket_mb))
    stretch = max(1.0, ranks * step.threads / shared_cores) if shared_cores else 1.0
    step_s, bound = bounded_step(step, stretch * step.compute_s, exposed)
    one_rank_s, _ = bounded_step(step, step.compute_s, 0.0)
    return Prediction(ranks=ranks, nodes=nodes, images_per_s=ranks * step.batch / step_s,
                      efficiency=one_rank_s / step_s, bound=bound, step_s=step_s, exposed_communication_s=exposed,
                      backend=backend, ranks_per_node=min(ranks, ranks_per_node), threads=step.threads)


def bounded_step(step: Step, compute_s: float, exposed_s: float) -> tuple[float, str]:
    """(a step's time, its bound) from its compute, its exposed communication and its input: an input pipeline
    beside the step bounds it where it is slower; one the rank runs itself adds to it."""
    input_s = step.batch / step.input_images_per_s if step.input_images_per_s else 0.0
    if step.input_overlaps and input_s > compute_s + exposed_s:
        return input_s, "input"
    step_s = compute_s + exposed_s + (0.0 if step.input_overlaps else input_s)
    if exposed_s >= COMMUNICATION_BOUND_SHARE * step_s:
        return step_s, "communication"
    return step_s, "input" if not step.input_overlaps and input_s > compute_s else "compute"


def break_even_nodes(rows: list[Prediction]) -> int | None:
    """The last node count worth paying for: the first node whose addition raises images/s by less than
    NODE_PAYS_SHARE of one node's own rate is not (None: every node in `rows` still pays)."""
    by_nodes = {r.nodes: r.images_per_s for r in rows}
    one_node = by_nodes.get(1)
    for nodes in sorted(by_nodes)[1:]:
        if nodes - 1 in by_nodes and one_node and by_nodes[nodes] - by_nodes[nodes - 1] < NODE_PAYS_SHARE * one_node:
            return nodes - 1
    return None


def declaration() -> dict:
    with open(DECLARATION, "rb") as f:
        return tomllib.load(f)


@functools.cache
def resnet50_gradient_bytes() -> int:
    """float32 gradients of torchvision's ResNet-50: one per parameter."""
    from torchvision.models import resnet50

    return 4 * sum(p.numel() for p in resnet50().parameters())


def thesis_step(one_gpu_images_per_s: float, batch: int, backward_over_forward: float) -> Step:
    """The thesis's 1-GPU step, split forward : backward as declared (it publishes no split)."""
    step_s = batch / one_gpu_images_per_s
    forward = step_s / (1 + backward_over_forward)
    return Step(forward_s=forward, backward_s=step_s - forward, optimizer_s=0.0, batch=batch,
                gradient_bytes=resnet50_gradient_bytes())


# (table, framework in analysis/reference/thesis.csv, its 1-GPU table, backend)
THESIS_ROWS = ((8, "pytorch", 2, "ddp"), (9, "horovod+pytorch", 3, "horovod"))


def thesis_validation() -> list[dict]:
    """Each row of Tables 8-9 predicted from the thesis's 1-GPU figure and the declared published link rates."""
    d = declaration()
    t = d["thesis"]
    rows = list(csv.DictReader((REFERENCE / "thesis.csv").read_text().splitlines()))
    intra, inter = (Link(t[k]["latency_s"], t[k]["bytes_per_s"]) for k in ("intra", "inter"))
    out = []
    for table, framework, one_table, backend in THESIS_ROWS:
        one = next(r for r in rows if r["table"] == str(one_table) and r["framework"] == framework)
        step = thesis_step(float(one["throughput"]), int(one["per_gpu_batch"]), t["backward_over_forward"])
        bucket = t["ddp_bucket_mb"] if backend == "ddp" else t["horovod_fusion_mb"]
        for r in (r for r in rows if r["table"] == str(table)):
            p = predict(step, backend, int(r["gpus"]), t["gpus_per_node"], intra, inter, bucket)
            measured = float(r["throughput"])
            error = p.images_per_s / measured - 1
            out.append({"table": table, "framework": framework, "gpus": int(r["gpus"]), "nodes": p.nodes,
                        "one_gpu": float(one["throughput"]), "predicted": p.images_per_s, "measured": measured,
                        "error": error, "holds": abs(error) <= d["tolerance"], "bound": p.bound,
                        "exposed_ms": 1000 * p.exposed_communication_s})
    return out


def validation_markdown(rows: list[dict], local: list[dict] | None = None) -> str:
    """The validation table: the thesis's rows, then the local cluster's (analysis/advisor/local.py: experiment 3 at
    each link rate, from results/tables/advisor_local.csv), each with its error; median and worst per source."""
    d = declaration()
    local = local or []
    lines = [f"# The advisor against measurements (tolerance {100 * d['tolerance']:.0f} % a row, declared "
             f"{d['declared']} in analysis/reference/advisor.toml)", "",
             "Made by `python -m suite analysis advise --validate` from analysis/advisor/model.py; thesis rows: "
             "Tables 8-9 predicted from the thesis's 1-GPU figure (Tables 2-3), a backward of two forwards (assumed: the thesis "
             "publishes no split), PCIe 3.0 x16 within a node and FDR InfiniBand 4x across, nominal rates."
             + (" Local rows: `make advise-local` (tools/advisor_local.py): experiment 3 on the local cluster at each "
                "link rate, predicted for each run's placement from that rate's probed link and a step timed at the "
                "run's threads; where it misses, the run's measured shares." if local else ""), "",
             "| source | framework | GPUs / processes | nodes | predicted img/s | measured img/s | error | holds "
             "| bound | exposed communication |" + (" where it misses |" if local else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if local else "")]
    lines += [validation_line(r, "", bool(local)) for r in rows]
    lines += [validation_line(r, r["why"] if not r["holds"] else "", True) for r in local]
    counted = predicted_rows(local)
    lines += ["", summary("thesis", rows)]
    if local:
        lines += ["", summary("local cluster", counted) if counted else "local cluster: no row has a prediction",
                  "", summary("all", rows + counted) if counted else ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def predicted_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not math.isnan(r["error"])]


def summary(label: str, rows: list[dict]) -> str:
    """'<label>: N rows: median |error| x %, worst |error| y %; k of N within the tolerance.'"""
    errors = [abs(r["error"]) for r in rows]
    held = sum(bool(r["holds"]) for r in rows)
    return (f"{label}: {len(rows)} rows: median |error| {100 * statistics.median(errors):.1f} %, worst |error| "
            f"{100 * max(errors):.1f} %; {held} of {len(rows)} within the tolerance.")


def validation_line(r: dict, why: str, with_why: bool) -> str:
    """One row of the validation table; a local run with no prediction says why instead of numbers."""
    source = f"thesis Table {r['table']}" if "table" in r else r["source"]
    if isinstance(r["error"], float) and math.isnan(r["error"]):
        cells = ["", f"{r['measured']:,.2f}", "", "", "", ""]
        why = r["why"]
    else:
        cells = [f"{r['predicted']:,.0f}", f"{r['measured']:,.2f}", f"{100 * r['error']:+.1f} %",
                 "yes" if r["holds"] else "no", r["bound"], f"{r['exposed_ms']:.1f} ms"]
    line = f"| {source} | {r['framework']} | {r['gpus']} | {r['nodes']} | " + " | ".join(cells) + " |"
    return line + (f" {why.replace('|', '/')} |" if with_why else "")


def nominal_link(name: str) -> Link:
    """A published link rate from analysis/reference/links.toml."""
    with open(REFERENCE / "links.toml", "rb") as f:
        links = tomllib.load(f)
    if name not in links:
        raise ValueError(f"no link named {name!r}: one of {', '.join(links)} (analysis/reference/links.toml)")
    return Link(links[name]["latency_s"], links[name]["bytes_per_s"])


def load_step(path: Path) -> tuple[Step, dict]:
    """A step measured by `python -m tools step-split` (its JSON), and the rest of what it recorded. The phases
    are timed between synchronisations, which cost time of their own: their proportions are kept and scaled to
    the whole step timed unsynchronised, which is what a run pays. InputError, naming the file, where it holds no
    step a prediction can be made from."""
    record = json_object(path, "a step", f"time it again: python -m tools step-split --json {path}")
    try:
        phases = [number(k, record.get(k), strict=False) for k in ("forward_s", "backward_s", "optimizer_s")]
        scale = number("whole_step_s", record.get("whole_step_s")) / number("forward_s + backward_s + optimizer_s",
                                                                            sum(phases))
        forward, backward, optimizer = (scale * t for t in phases)
        return Step(forward, backward, optimizer, record.get("batch"), record.get("gradient_bytes"),
                    record.get("input_images_per_s"), input_overlaps=record.get("loader_workers", 1) > 0,
                    threads=record.get("threads", 1)), record
    except (InputError, TypeError) as e:  # TypeError: a loader_workers that is no number
        raise InputError(f"{path}: {e}; time the step again: python -m tools step-split --json {path}") from None


def json_object(path: Path, what: str, todo: str) -> dict:
    """The JSON object a file holds; InputError naming the file, what it should hold and what to do otherwise."""
    try:
        document = json.loads(Path(path).read_text())
    except ValueError as e:
        raise InputError(f"{path} is not JSON ({e}): it should hold {what}; {todo}") from None
    if not isinstance(document, dict):
        raise InputError(f"{path} holds a JSON {type(document).__name__}, not an object: it should hold {what}; "
                         f"{todo}")
    return document


def scaling_table(step: Step, gpus_per_node: int, nodes: list[int], intra: Link, inter: Link) -> list[Prediction]:
    """DDP's and Horovod's predictions for 1 GPU, one whole node and each node count."""
    counts = sorted({1, *(gpus_per_node * n for n in nodes)})
    return [predict(step, backend, ranks, gpus_per_node, intra, inter)
            for backend in ("ddp", "horovod") for ranks in counts]


def process_table(step: Step, nodes: int, ranks_per_node: int, intra: Link, inter: Link,
                  shared_cores: int | None = None) -> list[Prediction]:
    """DDP's and Horovod's predictions for every process count 1...nodes x ranks_per_node, each node filled first."""
    return [predict(step, backend, ranks, ranks_per_node, intra, inter, shared_cores=shared_cores)
            for backend in ("ddp", "horovod") for ranks in range(1, nodes * ranks_per_node + 1)]


def scaling_markdown(rows: list[Prediction], title: str, unit: str = "GPUs") -> str:
    lines = [f"# {title}", "",
             f"| backend | {unit} | nodes | predicted img/s | efficiency | bound | exposed communication |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.backend} | {r.ranks} | {r.nodes} | {r.images_per_s:,.0f} | {100 * r.efficiency:.1f} % | "
              f"{r.bound} | {1000 * r.exposed_communication_s:.2f} ms |" for r in rows]
    for backend in ("ddp", "horovod"):
        even = break_even_nodes([r for r in rows if r.backend == backend])
        lines += ["", f"{backend}: " + (f"adding nodes stops paying after {even}" if even else
                                        "every node in the table still pays (each adds at least half a node's rate)")]
    return "\n".join(lines) + "\n"


def placement_markdown(rows: list[Prediction], title: str, unit: str = "processes") -> str:
    """A study's runs as placed (nodes, ranks a node, a rank's threads), each predicted, with its speed-up over the
    backend's 1-process run (rows of different threads a rank: the speed-up the study's own table will show)."""
    one = {r.backend: r.images_per_s for r in rows if r.ranks == 1}
    lines = [f"# {title}", "",
             f"| backend | {unit} | nodes | ranks a node | threads a rank | predicted img/s | speed-up over 1 | bound "
             "| exposed communication |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.backend} | {r.ranks} | {r.nodes} | {r.ranks_per_node} | {r.threads} | {r.images_per_s:,.0f} | "
              + (f"{r.images_per_s / one[r.backend]:.2f}x" if r.backend in one else "") +
              f" | {r.bound} | {1000 * r.exposed_communication_s:.2f} ms |" for r in rows]
    for backend in dict.fromkeys(r.backend for r in rows):
        even = break_even_nodes([r for r in rows if r.backend == backend])
        lines += ["", f"{backend}: " + (f"adding nodes stops paying after {even}" if even else
                                        "every node in the table still pays (each adds at least half a node's rate)")]
    return "\n".join(lines) + "\n"


LINK_FIT = "link_fit.json"  # in a cluster-check's folder: {"intra": record, "inter": record}
CHECK_ROOT = Path("results/cluster_check")
LINK_MODEL = ("Hockney's alpha-beta: a message of n bytes costs alpha + n / beta; an all_reduce of n bytes over p "
              "ranks is taken as a ring's 2 (p - 1) messages of n / p, so each timed all_reduce gives one message "
              "of n / p bytes taking t / (2 (p - 1)); beta: the least-squares slope through the messages within "
              f"{BANDWIDTH_SPAN}x of the largest, alpha: the median of the {LATENCY_POINTS} smallest messages' time "
              "beyond their bytes at beta; refused where it misses the largest all_reduce by more than the declared "
              "link_fit_tolerance (analysis/reference/advisor.toml)")


def link_fit_tolerance() -> float:
    """The share by which a link fit may miss its largest timed message: the newest dated change declaring it."""
    declared = [c["link_fit_tolerance"] for c in declaration().get("changes", []) if "link_fit_tolerance" in c]
    if not declared:
        raise InputError(f"{DECLARATION} declares no link_fit_tolerance: the link fit has nothing to be held to")
    return number("link_fit_tolerance", declared[-1])


def link_from_allreduces(points: list[list[float]], ranks: int) -> Link:
    """The per-message link a ring model needs, from all_reduces of n bytes over `ranks` timed at several sizes:
    t(n) = 2 (p - 1) (alpha + n / (p beta)), so each point is one message of n / p bytes taking t / (2 (p - 1))."""
    if ranks < 2:
        raise ValueError(f"an all_reduce over {ranks} rank(s) sends nothing: the link probe needs 2 or more ranks")
    messages = 2 * (ranks - 1)
    return fit_link([n / ranks for n, _ in points], [t / messages for _, t in points])


def largest_error(link: Link, points: list[list[float]], ranks: int) -> float:
    """What the fit predicts for the largest all_reduce timed, over what it took, minus 1; InputError (one line)
    beyond the declared tolerance: a fit that misses the very message where bandwidth rules would mislead every
    prediction made from it."""
    n, t = max(points)
    predicted = ring_allreduce_s(n, ranks, link)
    error, tolerance = predicted / t - 1, link_fit_tolerance()
    if abs(error) > tolerance:
        raise InputError(f"the fitted link misses its largest message ({human_bytes(n)} all_reduce): alpha + n / beta "
                         f"gives {1e3 * predicted:.1f} ms, it took {1e3 * t:.1f} ms ({100 * error:+.0f} %, tolerance "
                         f"{100 * tolerance:.0f} %, analysis/reference/advisor.toml): its times are no alpha-beta line "
                         f"(a busy machine, or a link still in its burst at the largest size); time it again on a "
                         f"quiet machine: {LINK_FIT_AGAIN}")
    return error


LINK_FIT_AGAIN = 'make cluster-check LAYERS="link-intra link-inter"'


def link_record(points: list[list[float]], ranks: int, hosts: list[str], rate: str | None,
                device: str = "cpu", cpu_model: str | None = None, shared_cores: int | None = None) -> dict:
    """What link_fit.json holds for one link: the timed points, where they were timed (the ranks' CPU model: a
    run is predicted only from its own machine's links), the fit, and how far it misses the largest all_reduce
    (InputError beyond the declared tolerance)."""
    link = link_from_allreduces(points, ranks)
    error = largest_error(link, points, ranks)
    return {"points": [[int(n), float(t)] for n, t in points], "ranks": ranks, "hosts": hosts,
            "link": rate, "device": device, "cpu_model": cpu_model, "model": LINK_MODEL,
            "latency_s": link.latency_s, "bytes_per_s": link.bytes_per_s, "largest_error": error,
            "shared_cores": shared_cores}


def describe_link_record(record: dict) -> str:
    """A check table's row: alpha, beta and what they were fitted to."""
    sizes = [n for n, _ in record["points"]]
    hosts = len(set(record["hosts"]))
    rate = f", link limited to {record['link']}" if record.get("link") else ""
    largest = (f", the largest predicted {round(100 * record['largest_error']):+d} %"
               if record.get("largest_error") is not None else "")  # fits made before issue 63 have none
    return (f"alpha {1e6 * record['latency_s']:.0f} us, beta {8 * record['bytes_per_s'] / 1e9:.3g} Gbit/s a message "
            f"(all_reduce of {record['ranks']} ranks on {hosts} host(s), {len(sizes)} sizes "
            f"{human_bytes(min(sizes))}-{human_bytes(max(sizes))}{largest}{rate})")


def human_bytes(n: float) -> str:
    for unit, size in (("MB", MB), ("KB", 1024)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def write_link_fit(folder: Path, which: str, record: dict) -> Path:
    """Put one link's record ("intra" or "inter") into folder/link_fit.json beside the other's."""
    path = Path(folder) / LINK_FIT
    fits = json.loads(path.read_text()) if path.exists() else {}
    fits[which] = record
    path.write_text(json.dumps(fits, indent=1) + "\n")
    return path


def annotate_link_fit(folder: Path, profile: str, shared_cores: int | None) -> None:
    """The profile the links were timed on, and where its nodes are hosts on one machine, that machine's cores
    (every rank's threads share them: analysis/advisor/model.py predict's shared_cores)."""
    path = Path(folder) / LINK_FIT
    if path.exists():
        fits = json.loads(path.read_text())
        path.write_text(json.dumps({**fits, "profile": profile, "shared_cores": shared_cores}, indent=1) + "\n")


LINK_FIT_TODO = "time the links again (make cluster-check LAYERS=\"link-intra link-inter\"), or remove the file"


def read_link_fit(path: Path) -> tuple[Link, Link, dict]:
    """(within a node, across nodes, the whole record) of a cluster-check's link_fit.json; InputError, naming the
    file and the value, where it is no object of two links with a latency and a bandwidth each."""
    fits = json_object(path, "an object of its intra and inter links", LINK_FIT_TODO)
    missing = [k for k in ("intra", "inter") if k not in fits]
    if missing:
        raise InputError(f"{path} has no {' or '.join(missing)} link: its cluster-check's link-"
                         f"{missing[0]} layer failed or was not run")
    intra, inter = (link_of(fits[k], k, path) for k in ("intra", "inter"))
    return intra, inter, fits


def link_of(record, which: str, path: Path) -> Link:
    if not isinstance(record, dict):
        raise InputError(f"{path}: {which} = {record!r} is not an object with latency_s and bytes_per_s; "
                         f"{LINK_FIT_TODO}")
    try:
        return Link(record.get("latency_s"), record.get("bytes_per_s"))
    except InputError as e:
        raise InputError(f"{path}: {which}.{e}; {LINK_FIT_TODO}") from None


def latest_link_fit(profile: str, root: Path = CHECK_ROOT, rate: str | None = "any") -> Path | None:
    """The newest cluster-check of `profile` under root with both links fitted; rate (the local cluster's tc rate,
    None = unlimited) keeps only checks whose across-nodes probe ran at that rate ("any": whatever rate)."""
    pattern = re.compile(rf"{re.escape(profile)}-\d{{8}}-\d{{6}}")
    for folder in sorted((p for p in Path(root).glob(f"{profile}-*") if pattern.fullmatch(p.name)), reverse=True):
        path = folder / LINK_FIT
        if not path.is_file():  # a check whose link layers did not run
            continue
        fits = json_object(path, "an object of its intra and inter links", LINK_FIT_TODO)  # damage: refused
        if {"intra", "inter"} <= fits.keys() and (rate == "any" or link_rate(fits["inter"]) == rate):
            read_link_fit(path)  # its values checked before it is chosen
            return path
    return None


def link_rate(record) -> str | None:
    """The link rate the local cluster set when a link was timed (None: unlimited)."""
    return record.get("link") if isinstance(record, dict) else None
