"""What the ONNX formats share: their runner, the operators a graph holds and the opset domains
and runtimes they need, the exporter's node metadata removed, onnxruntime's transformer fusion,
and onnxruntime's tools kept quiet."""

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

from ..onnx_session import INPUT_NAME, open_session, run
from .verify import Runner

# The operators that implement each pattern the transformer optimizer fuses, and what keeps it
# from fusing. LayerNormalization is one ONNX operator in every export (opset 17 and later).
PATTERNS = {
    "Attention": (
        ("Attention", "MultiHeadAttention"),
        "Softmax and MatMul remain: the optimizer matches separate query, key and value Linear "
        "layers, scores divided by sqrt(head size), no mask or BERT's padding mask added to "
        "them, and residuals written branch + x (models/transformer.py)",
    ),
    "LayerNormalization": (
        ("LayerNormalization", "SkipLayerNormalization"),
        "the network normalizes without nn.LayerNorm",
    ),
    "Gelu": (
        ("Gelu", "BiasGelu", "FastGelu"),
        "the Erf of an exact nn.GELU is what fuses; another activation, or GELU's tanh "
        "approximation, does not",
    ),
}


# The domain of ONNX's own operators, as the specification names it ("" in a file): the only
# one that every ONNX runtime implements.
STANDARD = "ai.onnx"


def runner(path: Path) -> Runner:
    # The same session, full graph optimization included, that predict.py serves with.
    session = open_session(path)
    return lambda inputs: run(session, inputs)


def operators(path: Path) -> Counter:
    """How many nodes of each operator the main graph holds; contrib ones as com.microsoft.<op>."""
    graph = onnx.load(path, load_external_data=False).graph
    return Counter(
        f"{node.domain}.{node.op_type}" if node.domain else node.op_type for node in graph.node
    )


def nodes(graph_nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """Every node of a graph, those of its subgraphs (an If's branches, a Loop's body) too."""
    for node in graph_nodes:
        yield node
        for attribute in node.attribute:
            for graph in [attribute.g, *attribute.graphs]:
                yield from nodes(graph.node)


def used_domains(model: onnx.ModelProto) -> set[str]:
    """The operator domains of every node, local functions' included; ONNX's own as "ai.onnx"
    (its name in the specification; "" in a file), onnxruntime's as "com.microsoft"."""
    graphs = [model.graph.node, *(function.node for function in model.functions)]
    return {node.domain or STANDARD for graph in graphs for node in nodes(graph)}


def opset_domains(path: Path) -> dict[str, int]:
    """The operator domains the file's nodes use, with the version of each that it imports."""
    model = onnx.load(path, load_external_data=False)
    used = used_domains(model)
    imported = {opset.domain or STANDARD: opset.version for opset in model.opset_import}
    return {domain: version for domain, version in imported.items() if domain in used}


def drop_unused_opsets(path: Path) -> None:
    """Keeps only the opset imports that the file's nodes use: onnxruntime's tools import every
    domain it knows (training, preview, its own layouts), which a runtime that lacks one may
    refuse, although no operator needs it."""
    model = onnx.load(path)
    used = used_domains(model)
    kept = [opset for opset in model.opset_import if (opset.domain or STANDARD) in used]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    onnx.save(model, path)


def runtimes(path: Path, domains: dict[str, int], sample: np.ndarray) -> list[str]:
    """The runtimes that run the file, of these operator domains: onnxruntime, which export
    checks every ONNX file in; for ONNX's own operators alone, OpenVINO too, and onnx's reference
    evaluator where it ran the file on `sample`: it implements each operator as the
    specification defines it, but not every case of each (a BERT's GatherElements over its
    position ids, for one)."""
    if not set(domains) <= {STANDARD}:
        return ["onnxruntime"]
    return ["onnxruntime", "openvino", *(["onnx.reference"] if evaluates(path, sample) else [])]


def evaluates(path: Path, sample: np.ndarray) -> bool:
    """Whether onnx's reference evaluator runs the file on `sample`."""
    try:
        ReferenceEvaluator(str(path)).run(None, {INPUT_NAME: sample})
    except Exception:  # whatever an operator it lacks, or a case it mishandles, raises
        return False
    return True


def new_operators(before: Counter, after: Counter) -> dict[str, int]:
    """The operators an optimizer added or multiplied, with their count after it: what it fused.
    A count by name alone would claim the LayerNormalization nodes every export holds."""
    return {op: count for op, count in sorted(after.items()) if count > before[op]}


def strip_node_metadata(path: Path) -> None:
    """Removes what the dynamo exporter records on every node (stack trace, module path, FX node):
    inference ignores it, it holds absolute paths of the machine that exported, so checksums
    would depend on where the project lives, and it is a quarter of a small transformer's file,
    which quantization would keep."""
    model = onnx.load(path)
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(model, path)


@contextmanager
def quiet() -> Iterator[None]:
    """onnxruntime's quantization and transformer tools log every step at INFO through the root
    logger or loggers that inherit its level, which Hydra sets to INFO: raised for the call."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def unsqueeze_one_axis_at_a_time(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Unsqueeze of several axes written as one Unsqueeze per axis, which is
    the same. torch's exporter merges the two Unsqueeze of BERT's padding mask into one, and
    onnxruntime's attention fusion matches the mask only as two."""
    constants = {tensor.name: tensor for tensor in model.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        axes = node.input[1] if node.op_type == "Unsqueeze" and len(node.input) > 1 else ""
        values = numpy_helper.to_array(constants[axes]).tolist() if axes in constants else []
        if len(values) < 2 or min(values) < 0 or values != sorted(values):
            nodes.append(node)
            continue
        source = node.input[0]
        for index, axis in enumerate(values):
            name = f"{node.name or node.output[0]}_axis{axis}"
            one = numpy_helper.from_array(np.array([axis], dtype=np.int64), f"{name}_axes")
            model.graph.initializer.append(one)
            output = node.output[0] if index == len(values) - 1 else f"{name}_output"
            nodes.append(helper.make_node("Unsqueeze", [source, one.name], [output], name))
            source = output
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def fuse_transformer(source: Path, path: Path, heads: int, dim: int) -> dict:
    """Writes `source` with its attention, LayerNorm and GELU subgraphs fused into onnxruntime's
    contrib operators; returns how many operators implement each pattern, and why any did not
    fuse."""
    options = FusionOptions("vit")
    # A text's padding mask, where it has one, goes to Attention as the mask itself (1 for a
    # token, 0 for padding), not as a count of tokens that assumes the padding comes last.
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    # Residual Add + LayerNormalization stay two operators: onnxruntime's CPU kernel for the
    # fused SkipLayerNormalization is several times slower than both at batch 64, and gives back
    # most of what the fused attention saves.
    options.enable_skip_layer_norm = options.enable_bias_skip_layer_norm = False
    with quiet():
        # opt_level=0: the Python fusions only, no CPU-specific operators (the serving session
        # optimizes further when it loads the file), and no torch import.
        model = optimize_model(
            unsqueeze_one_axis_at_a_time(onnx.load(source)),
            model_type="vit",
            num_heads=heads,
            hidden_size=dim,
            opt_level=0,
            use_gpu=False,
            optimization_options=options,
        )
        model.save_model_to_file(str(path))
    after = operators(path)
    counts = {
        pattern: sum(after[op] + after[f"com.microsoft.{op}"] for op in ops)
        for pattern, (ops, _) in PATTERNS.items()
    }
    return {
        "fused_patterns": counts,
        "not_fused": {pattern: PATTERNS[pattern][1] for pattern, n in counts.items() if not n},
    }
