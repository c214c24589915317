// IREE 3.13 (llvm-cpu): iree-compile fails on a vector-matrix product whose matrix is
// the conversion of a boolean matrix of constants ("'linalg.vecmat' op expected type
// of bb argument #1 ('i1') to match element or self type of the corresponding operand
// ('i8')"): here `x @ jnp.eye(3)`, whose identity JAX exports as `convert(iota ==
// iota)`; without const-expr hoisting too. The same product with the identity as
// `select(iota == iota, 1.0, 0.0)` compiles, and so does a matrix-matrix product.
// whilst converts boolean arrays by selects (whilst/lowering/_iree_boolean_converts.py).
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu boolean_matrix_in_vecmat.mlir -o /dev/null
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %rows = stablehlo.iota dim = 0 : tensor<3x3xi32>
  %columns = stablehlo.iota dim = 1 : tensor<3x3xi32>
  %diagonal = stablehlo.compare EQ, %rows, %columns, SIGNED : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
  %eye = stablehlo.convert %diagonal : (tensor<3x3xi1>) -> tensor<3x3xf32>
  %0 = stablehlo.dot_general %x, %eye, contracting_dims = [0] x [0] : (tensor<3xf32>, tensor<3x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
