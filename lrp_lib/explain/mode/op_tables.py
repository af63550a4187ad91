"""What each torch function and autograd node is to relevance, by name: the tables that
:mod:`lrp_lib.explain.mode.dispatch` reads to route a torch function called on an input-dependent tensor.
"""
from __future__ import annotations

__all__ = ["PLAIN", "DETACH", "PASS", "IDENTITY", "DROPOUT", "PASS_NODES", "COPY_INPLACE",
           "GATES", "SIGN_FLIPS", "HEADS", "AUGMENTED"]

#: Functions whose result carries no relevance (metadata, comparisons, integer results,
#: constructors, rounding); the result is not marked.
PLAIN = frozenset("""
size dim numel __len__ __bool__ item tolist is_floating_point is_complex element_size stride storage_offset
is_contiguous data_ptr __format__ __repr__ __str__ __hash__ __index__ __int__ __float__ __array__ __reduce_ex__
eq ne lt le gt ge __eq__ __ne__ __lt__ __le__ __gt__ __ge__ isnan isinf isfinite isclose allclose equal
argmax argmin argsort nonzero any all count_nonzero bincount unique unique_consecutive histc
new_zeros new_ones new_full new_empty new_tensor zeros_like ones_like empty_like full_like rand_like randn_like
randint_like sign sgn signbit logical_not logical_and logical_or logical_xor floor ceil round trunc
register_hook retain_grad requires_grad_ get_device numpy __deepcopy__ __setstate__ __getstate__
""".split())

#: Functions that drop the autograd link: their result is a constant (relevance sent there is lost).
DETACH = frozenset({"detach", "detach_"})

#: Functions whose gradient is already the relevance rule (copies, selections, max/min, max pooling: the
#: maximum's winner takes the relevance).
PASS = frozenset("""
view view_as reshape reshape_as flatten unflatten squeeze unsqueeze transpose t permute movedim moveaxis
swapaxes swapdims __getitem__ index_select gather take take_along_dim narrow select
hstack vstack dstack split split_with_sizes chunk unbind tensor_split expand expand_as broadcast_to
repeat repeat_interleave tile contiguous clone to float double half bfloat16 type type_as cpu cuda flip roll
amax amin maximum minimum fmax fmin topk sort msort kthvalue median where masked_fill index_fill
index_copy masked_scatter pad constant_pad_nd diagonal diag tril triu unsqueeze_ squeeze_ t_ transpose_
as_strided scatter narrow_copy select_scatter slice_scatter real view_as_real
max_pool1d max_pool2d max_pool3d max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices
adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d
""".split())

#: Elementwise functions of one marked input: the identity rule.
IDENTITY = frozenset("""
relu relu6 leaky_relu elu selu celu gelu silu mish softplus softsign tanh sigmoid hardtanh hardswish
hardsigmoid prelu rrelu log_sigmoid tanhshrink softshrink hardshrink threshold exp exp2 expm1 log log2
log10 log1p sqrt rsqrt square pow __rpow__ float_power abs absolute neg negative
positive clamp clamp_min clamp_max clip reciprocal normalize sin cos erf erfc sinh cosh atan asin
acos tan nan_to_num
""".split())

#: Dropout: refused in training mode, else the identity.
DROPOUT = frozenset("dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout feature_dropout".split())

#: Autograd nodes whose backward passes relevance correctly (the gradient of a copy, a view,
#: a selection); names without the trailing ``Backward<n>``.
PASS_NODES = frozenset("""
AccumulateGrad View UnsafeView Reshape ReshapeAlias Unsqueeze Squeeze Select Slice Index IndexSelect Gather
T Transpose Permute Clone Alias ToCopy Expand Cat Split SplitWithSizes Unbind Stack Narrow Max Min Amax Amin
Maximum Minimum Fmax Fmin Topk Sort Kthvalue Median Where MaskedFill MaskedScatter IndexPut IndexFill IndexCopy
CopyBackwards CopySlices ConstantPadNd Repeat Flip Roll Diagonal Tril Triu AsStrided Scatter ScatterReduce
Take TakeAlongDim ViewAsReal SelectScatter SliceScatter Movedim Unfold PermuteBackward Squeeze
MaxPool2DWithIndices MaxPool3DWithIndices AdaptiveMaxPool2D AdaptiveMaxPool3D
""".split())

#: In-place copies (no arithmetic): autograd's gradient already routes relevance to the copied values.
COPY_INPLACE = frozenset({"__setitem__", "copy_", "fill_", "zero_", "index_copy_", "masked_fill_", "masked_scatter_",
                           "scatter_", "index_put_", "index_fill_", "put_", "masked_fill", "index_copy"})

#: Elementwise functions whose output is a gate (a weight in [0, 1] that multiplies a signal): in a
#: product with a signal, the gate is held constant and the signal takes all the relevance (the
#: "signal-take-all" rule of Arras et al. 2017 for LSTM/GRU gates, CP-LRP for attention).
GATES = frozenset({"sigmoid", "hardsigmoid"})
#: Negations: the negation of a gate is one.
SIGN_FLIPS = frozenset({"neg", "negative"})
#: Functions that turn logits into probabilities: a model ending in one is explained from its input.
HEADS = frozenset({"softmax", "log_softmax", "sigmoid"})

#: Augmented assignments (``h += m``) and the function each computes in place.
AUGMENTED = {"__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__idiv__": "div"}
