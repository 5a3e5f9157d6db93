#pragma once
// Whether kernel launches on the current device use programmatic dependent launch (launch.h says
// when and why): for host files too (plumb doctor's GPU facts), which cannot include launch.h.
namespace plumb::gpu::k {

// The device's part is asked once per device and process, PLUMB_GPU_PDL at each call.
bool pdl_on();

}  // namespace plumb::gpu::k
