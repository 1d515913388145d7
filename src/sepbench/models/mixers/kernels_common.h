// What every CPU kernel of sepbench shares; compiled into each library (cpu_kernels.py puts this folder on the
// include path and hashes this file into each build's name).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/// Subnormal results as zero inside a kernel, the caller's mode restored on return: a decay exp(Delta A) drives
/// states below the smallest normal float, and an x86 core takes a microcode assist for each such operand (the
/// scan's backward ran 2.6-3.9x slower on an Intel Xeon). Values below the smallest normal number (1.2e-38 in
/// float32, 2.2e-308 in float64) change no result at the tests' tolerance.
struct FlushSubnormals {
    unsigned int saved = _mm_getcsr();
    FlushSubnormals() { _mm_setcsr(saved | 0x8040u); }  // FTZ | DAZ
    ~FlushSubnormals() { _mm_setcsr(saved); }
};
#else
struct FlushSubnormals {};
#endif
