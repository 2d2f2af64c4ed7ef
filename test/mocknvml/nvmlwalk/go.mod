// nvmlwalk: a program built with NVIDIA's go-nvml that walks every device of
// the mock NVML calling every getter (see main.go). A module of its own so
// that its one dependency moves nothing else; go-nvml's pkg/nvml/nvml.h is
// also the header the mock's exports are checked against (../nvml-header).
module nvdra.local/test/mocknvml/nvmlwalk

go 1.26.0

require github.com/NVIDIA/go-nvml v0.13.4-1
