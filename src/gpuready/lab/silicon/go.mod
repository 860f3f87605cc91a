module gpuready.lab/silicon

go 1.24
