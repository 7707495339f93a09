"""Small hand-written scheduled programs whose compact ASTs were worked out by hand."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def vector_add(
    A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32"), C: T.Buffer((64, 32), "float32")
):
    # tree: 0 root -> 1 parallel(64) -> 2 vectorized(32) -> 3 leaf C  (the extent-1 loop is dropped)
    for i in T.parallel(64):
        for j0 in range(1):
            for j in T.vectorized(32):
                with T.sblock("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = A[vi, vj] + B[vi, vj] + T.float32(1)


@T.prim_func(s_tir=True)
def matmul_relu(
    A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), D: T.Buffer((16, 16), "float32")
):
    # tree: 0 root -> 1 i(16) -> 2 j(16) -> 3 unrolled k(16) -> 4 leaf C (init), 5 leaf C (update)
    #            \-> 6 i(16) -> 7 j(16) -> 8 leaf D
    C = T.sblock_alloc_buffer((16, 16))
    for i, j in T.grid(16, 16):
        for k in T.unroll(16):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid(16, 16):
        with T.sblock("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = T.max(C[vi, vj], T.float32(0))


@T.prim_func(s_tir=True)
def with_while(A: T.Buffer((8,), "int32")):
    i = T.alloc_buffer((1,), "int32", scope="local")
    i[0] = 0
    while i[0] < 8:
        A[i[0]] = i[0]
        i[0] = i[0] + 1


@T.prim_func(s_tir=True)
def matmul_rowsum_exp(
    A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), S: T.Buffer((64,), "float32")
):
    # an unscheduled workload with two reductions; CUDA schedules of it bind loops to
    # blockIdx/threadIdx and some reduce S across threads
    C = T.sblock_alloc_buffer((64, 64))
    for i, j, k in T.grid(64, 64, 64):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid(64, 64):
        with T.sblock("S"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + T.exp(C[vi, vj])
