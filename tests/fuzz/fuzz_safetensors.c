/* fuzz_safetensors.c: libFuzzer target for the safetensors reader.  Any input
 * must either be rejected with a message or parse into tensors whose every
 * byte lies inside the input; each accepted tensor is read end to end so the
 * sanitizers see any out-of-bounds view.
 *   clang -fsanitize=fuzzer,address,undefined -Iengine ... (CMake: -DKHLUA_FUZZ=ON) */
#include "task/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kh_st_file *f = NULL;
    kh_err err;
    if (kh_st_parse(data, size, &f, &err) != KH_OK) {
        if (err.msg[0] == '\0')
            abort(); /* every rejection must say why */
        return 0;
    }
    for (size_t i = 0; i < kh_st_count(f); i++) {
        kh_tensor *t;
        if (kh_st_get(f, kh_st_name(f, i), &t, &err) != KH_OK)
            abort(); /* a listed tensor must be gettable */
        const uint8_t *p = t->data;
        if (t->nbytes && (p < data || p + t->nbytes > data + size))
            abort();
        double sum = 0;
        for (uint64_t k = 0; k < t->numel; k++)
            sum += kh_tensor_get(t, k);
        (void)sum;
        kh_tensor_free(t);
    }
    kh_st_close(f);
    return 0;
}
