package main

// CUresult values and the texts cuGetErrorName/cuGetErrorString give for them, as in NVIDIA's public
// cuda.h (enum cudaError_enum) and the real driver's strings: the product prints both when a call
// fails, so a lab failure reads like a real one.
const (
	cudaSuccess                       = 0
	cudaErrorInvalidValue             = 1
	cudaErrorOutOfMemory              = 2
	cudaErrorNotInitialized           = 3
	cudaErrorNoDevice                 = 100
	cudaErrorInvalidDevice            = 101
	cudaErrorInvalidImage             = 200
	cudaErrorInvalidContext           = 201
	cudaErrorPeerAccessUnsupported    = 217
	cudaErrorInvalidPTX               = 218
	cudaErrorInvalidHandle            = 400
	cudaErrorNotFound                 = 500
	cudaErrorNotReady                 = 600
	cudaErrorIllegalAddress           = 700
	cudaErrorPeerAccessAlreadyEnabled = 704
	cudaErrorPeerAccessNotEnabled     = 705
	cudaErrorSystemNotReady           = 802
	cudaErrorSystemDriverMismatch     = 803
	cudaErrorUnknown                  = 999
)

var errorNames = map[int]string{
	cudaSuccess:                       "CUDA_SUCCESS",
	cudaErrorInvalidValue:             "CUDA_ERROR_INVALID_VALUE",
	cudaErrorOutOfMemory:              "CUDA_ERROR_OUT_OF_MEMORY",
	cudaErrorNotInitialized:           "CUDA_ERROR_NOT_INITIALIZED",
	cudaErrorNoDevice:                 "CUDA_ERROR_NO_DEVICE",
	cudaErrorInvalidDevice:            "CUDA_ERROR_INVALID_DEVICE",
	cudaErrorInvalidImage:             "CUDA_ERROR_INVALID_IMAGE",
	cudaErrorInvalidContext:           "CUDA_ERROR_INVALID_CONTEXT",
	cudaErrorPeerAccessUnsupported:    "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	cudaErrorInvalidPTX:               "CUDA_ERROR_INVALID_PTX",
	cudaErrorInvalidHandle:            "CUDA_ERROR_INVALID_HANDLE",
	cudaErrorNotFound:                 "CUDA_ERROR_NOT_FOUND",
	cudaErrorNotReady:                 "CUDA_ERROR_NOT_READY",
	cudaErrorIllegalAddress:           "CUDA_ERROR_ILLEGAL_ADDRESS",
	cudaErrorPeerAccessAlreadyEnabled: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	cudaErrorPeerAccessNotEnabled:     "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	cudaErrorSystemNotReady:           "CUDA_ERROR_SYSTEM_NOT_READY",
	cudaErrorSystemDriverMismatch:     "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	cudaErrorUnknown:                  "CUDA_ERROR_UNKNOWN",
}

var errorStrings = map[int]string{
	cudaSuccess:                       "no error",
	cudaErrorInvalidValue:             "invalid argument",
	cudaErrorOutOfMemory:              "out of memory",
	cudaErrorNotInitialized:           "initialization error",
	cudaErrorNoDevice:                 "no CUDA-capable device is detected",
	cudaErrorInvalidDevice:            "invalid device ordinal",
	cudaErrorInvalidImage:             "device kernel image is invalid",
	cudaErrorInvalidContext:           "invalid device context",
	cudaErrorPeerAccessUnsupported:    "peer access is not supported between these two devices",
	cudaErrorInvalidPTX:               "a PTX JIT compilation failed",
	cudaErrorInvalidHandle:            "invalid resource handle",
	cudaErrorNotFound:                 "named symbol not found",
	cudaErrorNotReady:                 "device not ready",
	cudaErrorIllegalAddress:           "an illegal memory access was encountered",
	cudaErrorPeerAccessAlreadyEnabled: "peer access is already enabled",
	cudaErrorPeerAccessNotEnabled:     "peer access has not been enabled",
	cudaErrorSystemNotReady:           "system not yet initialized",
	cudaErrorSystemDriverMismatch:     "system has unsupported display driver / cuda driver combination",
	cudaErrorUnknown:                  "unknown error",
}
