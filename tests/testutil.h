// Helpers shared by the test programs (each test is its own executable: static inline).
#ifndef STG_TESTUTIL_H
#define STG_TESTUTIL_H

#include <math.h>
#include <stdint.h>

// max |a - ref| / max |ref| over n values; infinite when either holds a NaN.
static inline double rel_err(const double *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i])) return INFINITY;
        num = fmax(num, fabs(a[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    return num / (den > 0 ? den : 1);
}

#endif
