// Package cudadev is CUDA's view of the lab's one emulated machine: the devices a process sees, what cuInit
// answers, and the CUresult codes with their names and texts. The mock libcuda.so.1 (package cuda) answers the
// driver API from it and the emulated nvbandwidth (package tools) prints from it, so both agree by construction.
package cudadev

// CUresult values and the texts cuGetErrorName/cuGetErrorString give for them, as in NVIDIA's public
// cuda.h (enum cudaError_enum) and the real driver's strings: the product prints both when a call
// fails, so a lab failure reads like a real one.
const (
	Success                       = 0
	ErrorInvalidValue             = 1
	ErrorOutOfMemory              = 2
	ErrorNotInitialized           = 3
	ErrorNoDevice                 = 100
	ErrorInvalidDevice            = 101
	ErrorInvalidImage             = 200
	ErrorInvalidContext           = 201
	ErrorPeerAccessUnsupported    = 217
	ErrorInvalidPTX               = 218
	ErrorInvalidHandle            = 400
	ErrorNotFound                 = 500
	ErrorNotReady                 = 600
	ErrorIllegalAddress           = 700
	ErrorPeerAccessAlreadyEnabled = 704
	ErrorPeerAccessNotEnabled     = 705
	ErrorSystemNotReady           = 802
	ErrorSystemDriverMismatch     = 803
	ErrorUnknown                  = 999
)

// Names are cuGetErrorName's answers.
var Names = map[int]string{
	Success:                       "CUDA_SUCCESS",
	ErrorInvalidValue:             "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:              "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorNotInitialized:           "CUDA_ERROR_NOT_INITIALIZED",
	ErrorNoDevice:                 "CUDA_ERROR_NO_DEVICE",
	ErrorInvalidDevice:            "CUDA_ERROR_INVALID_DEVICE",
	ErrorInvalidImage:             "CUDA_ERROR_INVALID_IMAGE",
	ErrorInvalidContext:           "CUDA_ERROR_INVALID_CONTEXT",
	ErrorPeerAccessUnsupported:    "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	ErrorInvalidPTX:               "CUDA_ERROR_INVALID_PTX",
	ErrorInvalidHandle:            "CUDA_ERROR_INVALID_HANDLE",
	ErrorNotFound:                 "CUDA_ERROR_NOT_FOUND",
	ErrorNotReady:                 "CUDA_ERROR_NOT_READY",
	ErrorIllegalAddress:           "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorPeerAccessAlreadyEnabled: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	ErrorPeerAccessNotEnabled:     "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	ErrorSystemNotReady:           "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrorSystemDriverMismatch:     "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrorUnknown:                  "CUDA_ERROR_UNKNOWN",
}

// Texts are cuGetErrorString's answers.
var Texts = map[int]string{
	Success:                       "no error",
	ErrorInvalidValue:             "invalid argument",
	ErrorOutOfMemory:              "out of memory",
	ErrorNotInitialized:           "initialization error",
	ErrorNoDevice:                 "no CUDA-capable device is detected",
	ErrorInvalidDevice:            "invalid device ordinal",
	ErrorInvalidImage:             "device kernel image is invalid",
	ErrorInvalidContext:           "invalid device context",
	ErrorPeerAccessUnsupported:    "peer access is not supported between these two devices",
	ErrorInvalidPTX:               "a PTX JIT compilation failed",
	ErrorInvalidHandle:            "invalid resource handle",
	ErrorNotFound:                 "named symbol not found",
	ErrorNotReady:                 "device not ready",
	ErrorIllegalAddress:           "an illegal memory access was encountered",
	ErrorPeerAccessAlreadyEnabled: "peer access is already enabled",
	ErrorPeerAccessNotEnabled:     "peer access has not been enabled",
	ErrorSystemNotReady:           "system not yet initialized",
	ErrorSystemDriverMismatch:     "system has unsupported display driver / cuda driver combination",
	ErrorUnknown:                  "unknown error",
}
