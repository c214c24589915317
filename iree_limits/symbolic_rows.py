"""Which op forms IREE 3.13 (llvm-cpu) accepts for writing and reading a row of
symbolic shape `x: f32[b]` of a residual stack `f32[20, b]` (the row push and pop
of a vmapped gradient over a symbolic batch; whilst emits the accepted forms,
`whilst/ir/iree_forms/_symbolic_indexing.py`):

  * write, `dynamic_update_slice(stack, row[1, b], i, 0)`: REJECTED ("failed to
    legalize operation 'stablehlo.dynamic_update_slice' that was explicitly marked
    illegal"), whether the `1 x b` row comes from `dynamic_broadcast_in_dim` or
    `dynamic_reshape` (both themselves rejected the same way when they raise the
    rank, unless the broadcast says which dims expand).
  * write, `scatter(stack, [i], x)` with `update_window_dims = [0],
    inserted_window_dims = [0]` (the row without its leading 1): ACCEPTED.
  * read, `real_dynamic_slice` of the `1 x b` row, then `dynamic_reshape` to `b`
    (what JAX emits for `stack[i]`): REJECTED (`dynamic_reshape` illegal).
  * read, a gather of `b` single elements at `(i, iota)`: ACCEPTED.

    python iree_limits/symbolic_rows.py
"""
from iree.compiler import tools

FLAGS = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
         "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
ROW_THEN_DUS = {
"dynamic_broadcast_in_dim_row": """
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<1xi32>
    %nn = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %shape = stablehlo.concatenate %one, %nn, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %row = stablehlo.dynamic_broadcast_in_dim %x, %shape, dims = [1] : (tensor<?xf32>, tensor<2xi32>) -> tensor<1x?xf32>""",
"dynamic_reshape_row": """
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<1xi32>
    %nn = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %shape = stablehlo.concatenate %one, %nn, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %row = stablehlo.dynamic_reshape %x, %shape : (tensor<?xf32>, tensor<2xi32>) -> tensor<1x?xf32>""",
}

TAIL = """
    %i = stablehlo.constant dense<3> : tensor<i32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %out = stablehlo.dynamic_update_slice %stack, %row, %i, %z : (tensor<20x?xf32>, tensor<1x?xf32>, tensor<i32>, tensor<i32>) -> tensor<20x?xf32>
    return %out : tensor<20x?xf32>
  }
}"""

OTHER = {
"scatter_inserted_window_dim": """
    %i = stablehlo.constant dense<3> : tensor<1xi32>
    %out = "stablehlo.scatter"(%stack, %i, %x) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0]>, indices_are_sorted = true, unique_indices = true}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      stablehlo.return %b : tensor<f32>
    }) : (tensor<20x?xf32>, tensor<1xi32>, tensor<?xf32>) -> tensor<20x?xf32>""",
"dynamic_broadcast_shape_from_get_dimension_sizes": """
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %o1 = stablehlo.reshape %one : (tensor<i32>) -> tensor<1xi32>
    %nn = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %shape = stablehlo.concatenate %o1, %nn, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %row = stablehlo.dynamic_broadcast_in_dim %x, %shape, dims = [1] {known_expanding_dimensions = array<i64>, known_nonexpanding_dimensions = array<i64: 0>} : (tensor<?xf32>, tensor<2xi32>) -> tensor<1x?xf32>
    %i = stablehlo.constant dense<3> : tensor<i32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %out = stablehlo.dynamic_update_slice %stack, %row, %i, %z : (tensor<20x?xf32>, tensor<1x?xf32>, tensor<i32>, tensor<i32>) -> tensor<20x?xf32>""",
}


READS = {
"real_dynamic_slice_then_dynamic_reshape": """
    %b = stablehlo.get_dimension_size %stack, dim = 1 : (tensor<20x?xf32>) -> tensor<i32>
    %b1 = stablehlo.reshape %b : (tensor<i32>) -> tensor<1xi32>
    %i = stablehlo.constant dense<[3, 0]> : tensor<2xi32>
    %one = stablehlo.constant dense<1> : tensor<1xi32>
    %i1 = stablehlo.constant dense<4> : tensor<1xi32>
    %end = stablehlo.concatenate %i1, %b1, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %step = stablehlo.constant dense<1> : tensor<2xi32>
    %row = stablehlo.real_dynamic_slice %stack, %i, %end, %step : (tensor<20x?xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<1x?xf32>
    %out = stablehlo.dynamic_reshape %row, %b1 : (tensor<1x?xf32>, tensor<1xi32>) -> tensor<?xf32>""",
"gather_of_elements": """
    %b = stablehlo.get_dimension_size %stack, dim = 1 : (tensor<20x?xf32>) -> tensor<i32>
    %b1 = stablehlo.reshape %b : (tensor<i32>) -> tensor<1xi32>
    %one = stablehlo.constant dense<1> : tensor<1xi32>
    %shape = stablehlo.concatenate %b1, %one, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %iota = stablehlo.dynamic_iota %shape, dim = 0 : (tensor<2xi32>) -> tensor<?x1xi32>
    %i = stablehlo.constant dense<3> : tensor<i32>
    %ii = stablehlo.dynamic_broadcast_in_dim %i, %shape, dims = [] : (tensor<i32>, tensor<2xi32>) -> tensor<?x1xi32>
    %idx = stablehlo.concatenate %ii, %iota, dim = 1 : (tensor<?x1xi32>, tensor<?x1xi32>) -> tensor<?x2xi32>
    %out = "stablehlo.gather"(%stack, %idx) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1>}> : (tensor<20x?xf32>, tensor<?x2xi32>) -> tensor<?xf32>""",
}


def attempt(name, text):
    try:
        tools.compile_str(text, extra_args=FLAGS)
        print(f"{name}: compiles")
    except tools.CompilerToolError as e:
        print(f"{name}: rejected: {[l for l in str(e).splitlines() if 'error' in l][:1]}")


def main():
    head = ("module {\n  func.func @main(%x: tensor<?xf32>, %stack: tensor<20x?xf32>) "
            "-> tensor<20x?xf32> {")
    for name, body in ROW_THEN_DUS.items():
        attempt(name + " + dynamic_update_slice", head + body + TAIL)
    for name, body in OTHER.items():
        attempt(name, head + body + "\n    return %out : tensor<20x?xf32>\n  }\n}")
    for name, body in READS.items():
        attempt("read: " + name, "module {\n  func.func @main(%stack: tensor<20x?xf32>) -> "
                "tensor<?xf32> {" + body + "\n    return %out : tensor<?xf32>\n  }\n}")


if __name__ == "__main__":
    main()
