/* Functions with the KilnValue calling convention, as the code generators emit them:
 * params in order, then the symbolic sizes. */
#include <stdint.h>

typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;

/* vadd(A: float32[n], B: float32[n], C: float32[n]); shape_vars (n) */
int32_t vadd(KilnValue* args, int32_t num_args) {
  if (num_args != 4) return 1;
  const float* a = (const float*)args[0].v_handle;
  const float* b = (const float*)args[1].v_handle;
  float* c = (float*)args[2].v_handle;
  int64_t n = args[3].v_int64;
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
  return 0;
}

/* matmul(A: float64[n, k], B: float64[k, m], C: float64[n, m]); shape_vars (n, k, m) */
int32_t matmul(KilnValue* args, int32_t num_args) {
  if (num_args != 6) return 1;
  const double* a = (const double*)args[0].v_handle;
  const double* b = (const double*)args[1].v_handle;
  double* c = (double*)args[2].v_handle;
  int64_t n = args[3].v_int64, k = args[4].v_int64, m = args[5].v_int64;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t r = 0; r < k; ++r) acc += a[i * k + r] * b[r * m + j];
      c[i * m + j] = acc;
    }
  return 0;
}

/* axpy(X: float32[m, 4], Y: float32[m, 4], alpha: float32, shift: int32, enable: bool);
 * shape_vars (m): Y = alpha * X + shift where enable, else Y unchanged. */
int32_t axpy(KilnValue* args, int32_t num_args) {
  if (num_args != 6) return 1;
  const float* x = (const float*)args[0].v_handle;
  float* y = (float*)args[1].v_handle;
  double alpha = args[2].v_float64;
  int64_t shift = args[3].v_int64, enable = args[4].v_int64, m = args[5].v_int64;
  if (!enable) return 0;
  for (int64_t i = 0; i < m * 4; ++i) y[i] = (float)(alpha * x[i] + (double)shift);
  return 0;
}

/* scalars(out: int64[3], fout: float64[1], i: int8, u: uint64, f: float64, b: bool) */
int32_t scalars(KilnValue* args, int32_t num_args) {
  if (num_args != 6) return 1;
  int64_t* out = (int64_t*)args[0].v_handle;
  double* fout = (double*)args[1].v_handle;
  out[0] = args[2].v_int64;
  out[1] = args[3].v_int64; /* uint64 bit pattern */
  out[2] = args[5].v_int64;
  fout[0] = args[4].v_float64;
  return 0;
}

/* count(counter: int64[1]): counts its calls. */
int32_t count(KilnValue* args, int32_t num_args) {
  (void)num_args;
  ((int64_t*)args[0].v_handle)[0] += 1;
  return 0;
}

/* checked(A: int32[n]); shape_vars (n): fails (status 7) when A[0] is negative. */
int32_t checked(KilnValue* args, int32_t num_args) {
  const int32_t* a = (const int32_t*)args[0].v_handle;
  if (num_args != 2 || args[1].v_int64 < 1) return 2;
  return a[0] < 0 ? 7 : 0;
}

/* empty3(A, B, C: float32[n]); shape_vars (n): does nothing (measures call overhead). */
int32_t empty3(KilnValue* args, int32_t num_args) {
  (void)args;
  (void)num_args;
  return 0;
}
