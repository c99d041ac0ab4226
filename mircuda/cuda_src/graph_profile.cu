// The kernel of `python -m mircuda graph-profile` (mircuda/cli/_graph_profile.py); its spin kernel is
// mircuda.timing's.

// One step of the measured sequence: about as cheap as an empty kernel, but it leaves a count that
// proves every launch and every replayed node ran. Launched with 1 block of 32 threads; launches on
// one stream run in order, so the plain increment does not race.
extern "C" __global__ void tick(unsigned int* counter) {
    if (threadIdx.x == 0) counter[0] += 1u;
}
