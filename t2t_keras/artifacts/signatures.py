"""Signatures in TensorFlow Serving's metadata format: read off a SavedModel, or described for another kind.

    {"translate": {"inputs": {"inputs": {"dtype": "DT_STRING", "tensor_shape": {"dim": [{"size": "-1"}],
     "unknown_rank": false}}, ...}, "outputs": {...}, "method_name": "tensorflow/serving/predict"}}

Describing one (`described`) needs no TensorFlow: the CTranslate2 artifact does it in a process without it.
"""

METHOD_NAME = "tensorflow/serving/predict"


def signature_defs(saved_model):
    """A SavedModel's signatures: inputs and outputs with dtype and shape."""
    from tensorflow.core.framework import types_pb2

    return {
        name: {"inputs": {key: _info(types_pb2.DataType.Name(spec.dtype.as_datatype_enum), spec.shape)
                          for key, spec in sorted(function.structured_input_signature[1].items())},
               "outputs": {key: _info(types_pb2.DataType.Name(spec.dtype.as_datatype_enum), spec.shape)
                           for key, spec in sorted(function.structured_outputs.items())},
               "method_name": METHOD_NAME}
        for name, function in saved_model.signatures.items()
    }


def described(name, inputs, outputs):
    """One signature of a kind without a SavedModel: `inputs` and `outputs` map names to `(dtype, dims)`, a dim
    None for any size."""
    return {name: {"inputs": {key: _info(*spec) for key, spec in inputs.items()},
                   "outputs": {key: _info(*spec) for key, spec in outputs.items()}, "method_name": METHOD_NAME}}


def _info(dtype, dims):
    return {"dtype": dtype, "tensor_shape": {"dim": [{"size": str(-1 if size is None else size)} for size in dims],
                                             "unknown_rank": False}}
