"""The TFLite file format as the package reads and patches it: op names, and the token packing's `IF` rewrite.

Depends on: the TFLite flatbuffer schema (`schema_py_generated`, LiteRT's or TensorFlow's copy: `Model`,
`OperatorCodes`, `IfOptions` with `then_subgraph_index` as field 0 of its table), and on the names TensorFlow's
converter gives the subgraphs of a `tf.cond` (`..._cond_true_N` / `..._cond_false_N`, from the function names of the
layers in `layers.packing`). Pinned by `tests/test_platform.py` (a converted packing model is rewritten and runs).
"""

import re
import struct


def _schema():
    """The TFLite flatbuffer schema's Python module: LiteRT's, else TensorFlow's (a conversion needs no LiteRT)."""
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError:
        from tensorflow.lite.python import schema_py_generated
    return schema_py_generated


def op_names(data):
    """The names of the ops of a `.tflite` flatbuffer: builtin ones as `ADD`, custom ones by their custom code."""
    schema = _schema()
    builtins = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    model = schema.Model.GetRootAs(data, 0)
    names = set()
    for index in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(index)
        custom = code.CustomCode()
        if custom:
            names.add(custom.decode("utf-8"))
        else:
            names.add(builtins.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "UNKNOWN"))
    return names


# The token packing's branches (`layers.packing._skip_if_all_packed`): `reshaped` when a batch has no padding,
# else `gathered`, which is right for every batch.
_PACKING_BRANCH = re.compile(r"_(pack_tokens|unpack_tokens|attention)(_\d+)?_cond_(true|false)_\d+")


def gathered_branches(data):
    """`data` with each of the token packing's conditions (`IF`) taking its gather branch whatever the batch.

    LiteRT prepares both branches of an `IF` for the shapes of each call; the
    reshape branch (valid only for a batch without padding) then fails to
    prepare on any batch with padding ("num_input_elements !=
    num_output_elements"). The gather branch gives the same numbers for every
    batch, so its subgraph becomes the `then` branch too: the indices are
    rewritten in place (the flatbuffer's size and every other byte unchanged).
    """
    schema = _schema()
    data = bytearray(data)
    model = schema.Model.GetRootAs(data, 0)
    names = [(model.Subgraphs(i).Name() or b"").decode("utf-8", "replace") for i in range(model.SubgraphsLength())]
    codes = [max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(model.OperatorCodesLength())]
    for graph in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(graph)
        for index in range(subgraph.OperatorsLength()):
            operator = subgraph.Operators(index)
            if codes[operator.OpcodeIndex()] != schema.BuiltinOperator.IF:
                continue
            options = schema.IfOptions()
            table = operator.BuiltinOptions()
            options.Init(table.Bytes, table.Pos)
            then_index, else_index = options.ThenSubgraphIndex(), options.ElseSubgraphIndex()
            then_name, else_name = _PACKING_BRANCH.search(names[then_index]), _PACKING_BRANCH.search(names[else_index])
            if not (then_name and else_name and then_name.group(3) == "true" and else_name.group(3) == "false"):
                continue
            field = table.Offset(4)  # then_subgraph_index (the options' table is `table`, a flatbuffers Table)
            struct.pack_into("<i", data, table.Pos + field, else_index)
    return bytes(data)
