// Compile check of the product form (kernel/bigm.cu, bigw) for sm_90a and sm_100:
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100,code=sm_100 -I kernel -Xptxas -v -c lab/bigm3/bwcheck.cu
#include "bigm.cu"
TPRUN_BIGW_FAMILY(wg1k4, 64, 4)
TPRUN_BIGW_FAMILY(wg2k2, 128, 2)
