"""The SASS audit's reading of cuobjdump output (no toolkit needed)."""
from moegen.sass import summarize

SASS = """
	code for sm_100a
		Function : _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalILi1EEEEEvT_
	.headerflags	@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM100)"
        /*0000*/                   LDC R1, c[0x0][0x37c] ;                  /* 0x0000df00ff017b82 */
        /*0010*/                   UTCQMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ; /* 0x0000000a04007ea7 */
	code for sm_100a
		Function : _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalILi1EEEEEvT_
        /*0000*/                   UTCQMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ; /* 0x0000000a04007ea7 */
        /*0010*/                   STL [R1], R2 ;                            /* 0x0000000201007387 */
		Function : _ZN6moegen15finalize_kernelEv
        /*0000*/                   LDL R2, [R1] ;                            /* 0x0000000001027983 */
"""


def test_a_kernel_in_two_cubins_counts_twice_and_local_memory_is_seen():
    kernels = summarize(SASS, ("UTCQMMA",))
    gemm = [k for k in kernels if "GemmUniversal" in k]
    assert len(gemm) == 2 and gemm[1].endswith("(copy 2)")
    assert [kernels[k]["MMA"] for k in gemm] == [1, 1]
    assert kernels[gemm[0]]["STL"] == 0 and kernels[gemm[1]]["STL"] == 1
    assert kernels["_ZN6moegen15finalize_kernelEv"] == {"MMA": 0, "LDL": 1, "STL": 0, "instructions": 1}
