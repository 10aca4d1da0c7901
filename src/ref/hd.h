/*
 * hd.h — SY_HD marks a rule written once for both backends: a __host__ __device__ inline function where a
 * kernel includes it (nvcc), a static inline C function where the host backend or a test does.
 */
#ifndef SY_REF_HD_H
#define SY_REF_HD_H

#ifdef __CUDACC__
#define SY_HD __host__ __device__ __forceinline__
#else
#define SY_HD static inline
#endif

#endif
