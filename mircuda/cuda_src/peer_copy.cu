// The kernel of Stream.copy_peer(..., engine="sm") (mircuda/compile/_peer_copy.py): a copy driven by the
// SMs of the stream's device instead of its copy engines. One side of the copy is another device's memory
// reached over NVLink (peer access enabled / pool access granted), so these loads or stores are NVLink
// transactions; 16-byte accesses and a grid that fills every SM keep enough of them in flight.
//
// Launched with blocks of at most 512 threads (the launch bounds ask for 4 resident blocks of 512 per
// SM: at most 32 registers a thread) and at least 16 threads in all (the head and tail bytes take one thread each).
// When dst and src agree modulo 16 bytes the body moves uint4s (4 per thread and step, loads before
// stores, so each thread has 64 bytes in flight); otherwise every byte is moved on its own (correct, slow).

extern "C" __global__ void __launch_bounds__(512, 4) mircuda_peer_copy(unsigned long long dst, unsigned long long src,
                                             unsigned long long nbytes) {
    unsigned char* d = reinterpret_cast<unsigned char*>(dst);
    const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    if (((dst ^ src) & 15ull) != 0ull) {
        for (unsigned long long i = tid; i < nbytes; i += stride) d[i] = s[i];
        return;
    }
    unsigned long long head = (16ull - (dst & 15ull)) & 15ull;
    if (head > nbytes) head = nbytes;
    if (tid < head) d[tid] = s[tid];
    const unsigned long long body = (nbytes - head) >> 4;
    uint4* dv = reinterpret_cast<uint4*>(d + head);
    const uint4* sv = reinterpret_cast<const uint4*>(s + head);
    unsigned long long i = tid;
    for (; i + 3ull * stride < body; i += 4ull * stride) {
        const uint4 a = sv[i], b = sv[i + stride], c = sv[i + 2ull * stride], e = sv[i + 3ull * stride];
        dv[i] = a;
        dv[i + stride] = b;
        dv[i + 2ull * stride] = c;
        dv[i + 3ull * stride] = e;
    }
    for (; i < body; i += stride) dv[i] = sv[i];
    const unsigned long long tail = head + (body << 4);
    if (tid < nbytes - tail) d[tail + tid] = s[tail + tid];
}
