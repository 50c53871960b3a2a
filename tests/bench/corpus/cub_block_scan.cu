// cub: block inclusive scan
#include <cub/block/block_scan.cuh>
extern "C" __global__ void __launch_bounds__(128) cub_scan(const int *x, int *y, int n)
{
    using BS = cub::BlockScan<int, 128>;
    __shared__ typename BS::TempStorage tmp;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0, r;
    BS(tmp).InclusiveSum(v, r);
    if (i < n)
        y[i] = r;
}
