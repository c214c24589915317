"""Which op form IREE 3.13 (llvm-cpu) accepts for writing a symbolic-shaped row
`x: f32[b]` into a residual stack `f32[20, b]` (the row push of a vmapped
gradient with a symbolic batch):

  * `dynamic_update_slice(stack, row[1, b], i, 0)`: REJECTED ("failed to legalize
    operation 'stablehlo.dynamic_update_slice' that was explicitly marked illegal"),
    whether the `1 x b` row comes from `dynamic_broadcast_in_dim` or `dynamic_reshape`
    (both themselves rejected the same way when they raise the rank).
  * `scatter(stack, [i], x)` with `update_window_dims = [0], inserted_window_dims = [0],
    scatter_dims_to_operand_dims = [0]` (the row without its leading 1): ACCEPTED and
    correct (row 3 of a 20 x 3 stack set to 7, 8, 9).

    python bench/iree_limits/symbolic_row_write.py
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


if __name__ == "__main__":
    main()
