/* l_tensor.c: kh.tensor, host tensors in Lua: made from a table, from the
 * seeded generator, or from a safetensors file; read back as tables; saved.
 * A kh.Tensor owns its bytes and counts as an engine object until closed
 * (t:close(), __close or __gc).  Element indices are 1-based and flat
 * (row-major), like the list t:totable() returns. */
#include "l_tensor.h"

#include "l_json.h"

#include "task/rng.h"
#include "task/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TENSOR_MT "kh.Tensor"

typedef struct l_tensor {
    kh_tensor *t; /* NULL once closed */
    kh_engine *e;
    int seeded;   /* made by the generator: (seed, stream) remade it */
    uint64_t seed;
    uint32_t stream;
    const char *how; /* "random" or "dsa_kcache" */
} l_tensor;

void kh_lua_push_tensor(lua_State *L, kh_engine *e, kh_tensor *t)
{
    /* created closed, then filled: a __gc on a half-made one frees nothing */
    l_tensor *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    u->e = e;
    luaL_setmetatable(L, TENSOR_MT);
    u->t = t;
    kh_engine_obj_acquire(e);
}

static l_tensor *check_ud(lua_State *L, int idx) { return luaL_checkudata(L, idx, TENSOR_MT); }

kh_tensor *kh_lua_check_tensor(lua_State *L, int idx)
{
    l_tensor *u = check_ud(L, idx);
    if (!u->t)
        luaL_argerror(L, idx, "tensor is closed");
    return u->t;
}

static int t_close(lua_State *L)
{
    l_tensor *u = check_ud(L, 1);
    if (u->t) {
        kh_tensor_free(u->t);
        u->t = NULL;
        kh_engine_obj_release(u->e);
    }
    return 0;
}

static kh_dtype check_dtype(lua_State *L, int idx)
{
    kh_dtype t;
    kh_err err;
    if (kh_dtype_parse(luaL_checkstring(L, idx), &t, &err) != KH_OK)
        luaL_argerror(L, idx, err.msg);
    return t;
}

/* A shape table {d1, d2, ...} ({} = 0-D); returns ndim. */
static int check_shape(lua_State *L, int idx, int64_t *shape)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer n = luaL_len(L, idx);
    if (n > KH_TENSOR_MAX_DIMS)
        luaL_argerror(L, idx, "too many dimensions (at most 16)");
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        int ok;
        lua_Integer d = lua_tointegerx(L, -1, &ok);
        lua_pop(L, 1);
        if (!ok || d < 0)
            luaL_argerror(L, idx, "shape entries must be non-negative integers");
        shape[i - 1] = (int64_t)d;
    }
    return (int)n;
}

static kh_tensor *new_or_raise(lua_State *L, kh_dtype t, int ndim, const int64_t *shape)
{
    kh_tensor *x;
    kh_err err;
    if (kh_tensor_new(&x, t, ndim, shape, &err) != KH_OK)
        luaL_error(L, "%s", err.msg);
    return x;
}

static void set_from_lua(lua_State *L, kh_tensor *x, uint64_t i, int idx)
{
    if (x->dtype == KH_DTYPE_BOOL && lua_isboolean(L, idx))
        kh_tensor_set(x, i, lua_toboolean(L, idx) ? 1.0 : 0.0);
    else if (kh_dtype_is_int(x->dtype) && lua_isinteger(L, idx)) {
        /* exact for int64 beyond 2^53, and saturating like encode */
        lua_Integer v = lua_tointeger(L, idx);
        int bits = kh_dtype_bits(x->dtype);
        if (bits < 64) {
            lua_Integer hi = ((lua_Integer)1 << (bits - 1)) - 1, lo = -hi - 1;
            v = v > hi ? hi : v < lo ? lo : v;
        }
        kh_dtype_set_code(x->dtype, x->data, i, (uint64_t)v);
    } else
        kh_tensor_set(x, i, lua_tonumber(L, idx));
}

/* Remember how the tensor on top of the stack was generated. */
static void mark_seeded(lua_State *L, uint64_t seed, uint32_t stream, const char *how)
{
    l_tensor *u = lua_touserdata(L, -1);
    u->seeded = 1;
    u->seed = seed;
    u->stream = stream;
    u->how = how;
}

/* kh.tensor.new(dtype, shape [, values]) -> Tensor, zero-filled or filled
 * from a flat row-major list of numbers (booleans for bool). */
static int l_new(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    kh_dtype t = check_dtype(L, 1);
    int64_t shape[KH_TENSOR_MAX_DIMS];
    int ndim = check_shape(L, 2, shape);
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        /* validate before allocating: raising later would leak the tensor */
        uint64_t numel = 1;
        for (int i = 0; i < ndim; i++)
            numel *= (uint64_t)shape[i];
        lua_Integer n = luaL_len(L, 3);
        if ((uint64_t)n != numel)
            return luaL_error(L, "bad argument #3 to 'new' (%I values for %I elements)", n,
                              (lua_Integer)numel);
        for (lua_Integer i = 1; i <= n; i++) {
            int ty = lua_geti(L, 3, i);
            lua_pop(L, 1);
            if (ty != LUA_TNUMBER && !(ty == LUA_TBOOLEAN && t == KH_DTYPE_BOOL))
                return luaL_error(L, "bad argument #3 to 'new' (value %d is a %s, not a number)",
                                  (int)i, lua_typename(L, ty));
        }
    }
    kh_tensor *x = new_or_raise(L, t, ndim, shape);
    if (!lua_isnoneornil(L, 3))
        for (uint64_t i = 0; i < x->numel; i++) {
            lua_geti(L, 3, (lua_Integer)i + 1);
            set_from_lua(L, x, i, -1);
            lua_pop(L, 1);
        }
    kh_lua_push_tensor(L, e, x);
    return 1;
}

/* kh.tensor.random(dtype, shape, seed [, stream]) -> Tensor from the seeded
 * generator (FlashInfer-Bench's distributions; rng.h), or nil, msg, "EINTR". */
static int l_random(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    kh_dtype t = check_dtype(L, 1);
    int64_t shape[KH_TENSOR_MAX_DIMS];
    int ndim = check_shape(L, 2, shape);
    uint64_t seed = (uint64_t)luaL_checkinteger(L, 3);
    lua_Integer stream = luaL_optinteger(L, 4, 0);
    luaL_argcheck(L, stream >= 0 && stream <= 0xFFFFFFFF, 4, "stream must be in [0, 2^32)");
    kh_tensor *x = new_or_raise(L, t, ndim, shape);
    kh_err err;
    if (kh_rng_fill(e, x, seed, (uint32_t)stream, &err) != KH_OK) {
        kh_tensor_free(x);
        return kh_lua_fail(L, &err);
    }
    kh_lua_push_tensor(L, e, x);
    mark_seeded(L, seed, (uint32_t)stream, "random");
    return 1;
}

/* kh.tensor.dsa_kcache(shape, seed [, stream]) -> int8 Tensor [pages,
 * page_size, 1, head_dim + 4]: FlashInfer-Bench's random DSA indexer k cache
 * (bf16 randn packed to the deep_gemm FP8 layout; rng.h). */
static int l_dsa_kcache(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    int64_t shape[KH_TENSOR_MAX_DIMS];
    int ndim = check_shape(L, 1, shape);
    uint64_t seed = (uint64_t)luaL_checkinteger(L, 2);
    lua_Integer stream = luaL_optinteger(L, 3, 0);
    luaL_argcheck(L, stream >= 0 && stream <= 0xFFFFFFFF, 3, "stream must be in [0, 2^32)");
    luaL_argcheck(L, ndim == 4 && shape[2] == 1 && shape[3] > 4 && shape[1] > 0, 1,
                  "shape must be {pages, page_size, 1, head_dim + 4}");
    kh_tensor *x = new_or_raise(L, KH_DTYPE_I8, ndim, shape);
    kh_err err;
    if (kh_rng_fill_dsa_kcache(e, x, seed, (uint32_t)stream, &err) != KH_OK) {
        kh_tensor_free(x);
        return kh_lua_fail(L, &err);
    }
    kh_lua_push_tensor(L, e, x);
    mark_seeded(L, seed, (uint32_t)stream, "dsa_kcache");
    return 1;
}

static void push_info(lua_State *L, kh_dtype t)
{
    lua_createtable(L, 0, 5);
    lua_pushstring(L, kh_dtype_name(t));
    lua_setfield(L, -2, "name");
    lua_pushstring(L, kh_dtype_st_name(t));
    lua_setfield(L, -2, "safetensors");
    lua_pushinteger(L, kh_dtype_bits(t));
    lua_setfield(L, -2, "bits");
    lua_pushboolean(L, kh_dtype_is_float(t));
    lua_setfield(L, -2, "float");
    lua_pushboolean(L, kh_dtype_is_int(t));
    lua_setfield(L, -2, "int");
}

/* kh.tensor.dtype(name) -> {name, safetensors, bits, float, int}. */
static int l_dtype(lua_State *L)
{
    push_info(L, check_dtype(L, 1));
    return 1;
}

/* kh.tensor.dtypes() -> list of FlashInfer-Bench dtype names. */
static int l_dtypes(lua_State *L)
{
    lua_createtable(L, KH_DTYPE_COUNT, 0);
    for (int i = 0; i < KH_DTYPE_COUNT; i++) {
        lua_pushstring(L, kh_dtype_name((kh_dtype)i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* kh.tensor.encode(dtype, x) -> code; kh.tensor.decode(dtype, code) -> x. */
static int l_encode(lua_State *L)
{
    kh_dtype t = check_dtype(L, 1);
    lua_pushinteger(L, (lua_Integer)kh_dtype_encode(t, luaL_checknumber(L, 2)));
    return 1;
}

static int l_decode(lua_State *L)
{
    kh_dtype t = check_dtype(L, 1);
    lua_pushnumber(L, kh_dtype_decode(t, (uint64_t)luaL_checkinteger(L, 2)));
    return 1;
}

/* kh.tensor.load(path [, name]) -> Tensor (with name), or a table
 * {name = Tensor} and a metadata table; nil, msg, code on failure.  Tensors
 * are copies: the file is closed before returning. */
static int l_load(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    const char *path = luaL_checkstring(L, 1);
    const char *name = luaL_optstring(L, 2, NULL);
    kh_st_file *f;
    kh_err err;
    if (kh_st_open(path, &f, &err) != KH_OK)
        return kh_lua_fail(L, &err);
    if (name) {
        kh_tensor *x;
        kh_status st = kh_st_get_copy(f, name, &x, &err);
        kh_st_close(f);
        if (st)
            return kh_lua_fail(L, &err);
        kh_lua_push_tensor(L, e, x);
        return 1;
    }
    /* copy every tensor first, so no Lua error can strike while f is open
     * with copies not yet owned by userdata */
    size_t n = kh_st_count(f);
    kh_tensor **xs = calloc(n ? n : 1, sizeof *xs);
    if (!xs) {
        kh_st_close(f);
        return luaL_error(L, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (kh_st_get_copy(f, kh_st_name(f, i), &xs[i], &err) != KH_OK) {
            for (size_t k = 0; k < i; k++)
                kh_tensor_free(xs[k]);
            free(xs);
            kh_st_close(f);
            return kh_lua_fail(L, &err);
        }
    /* [] -> [tensors] ; names are copied by Lua before f closes */
    lua_createtable(L, 0, (int)n);
    for (size_t i = 0; i < n; i++) {
        kh_lua_push_tensor(L, e, xs[i]);
        xs[i] = NULL;
        lua_setfield(L, -2, kh_st_name(f, i));
    }
    free(xs);
    /* [tensors] -> [tensors, meta] */
    const json_t *meta = kh_st_metadata_all(f);
    if (meta)
        kh_lua_push_json(L, meta);
    else
        lua_newtable(L);
    kh_st_close(f);
    return 2;
}

/* qsort order for tensor names: files list tensors in sorted order. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* kh.tensor.save(path, {name = Tensor, ...} [, {key = "value"}]) -> true,
 * or nil, msg, code.  Tensors are written in sorted name order.  A generated
 * tensor's recipe is recorded in the metadata as "khlua.seed.<name>" =
 * "<seed> <stream> <random|dsa_kcache>" (seed as unsigned decimal), unless
 * the caller's metadata sets that key itself. */
static int l_save(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!lua_isnoneornil(L, 3))
        luaL_checktype(L, 3, LUA_TTABLE);
    /* pass 1: count and check types (raising here frees nothing) */
    size_t n = 0, nm = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return luaL_argerror(L, 2, "keys must be tensor names (strings)");
        l_tensor *u = luaL_testudata(L, -1, TENSOR_MT);
        if (!u || !u->t)
            return luaL_argerror(L, 2, "values must be open kh.Tensor objects");
        n++;
        lua_pop(L, 1);
    }
    /* [..] -> [.., meta]: the caller's metadata plus the seeds, built before
     * any malloc so that a Lua error here leaks nothing */
    lua_newtable(L);
    int meta = lua_gettop(L);
    if (!lua_isnoneornil(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
                return luaL_argerror(L, 3, "metadata must map strings to strings");
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, meta);
        }
    }
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        l_tensor *u = lua_touserdata(L, -1);
        if (u->seeded) {
            lua_pushfstring(L, "khlua.seed.%s", lua_tostring(L, -2));
            if (lua_rawget(L, meta) == LUA_TNIL) {
                char v[96];
                snprintf(v, sizeof v, "%llu %u %s", (unsigned long long)u->seed,
                         (unsigned)u->stream, u->how);
                lua_pushfstring(L, "khlua.seed.%s", lua_tostring(L, -3));
                lua_pushstring(L, v);
                lua_rawset(L, meta);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    while (lua_next(L, meta)) {
        nm++;
        lua_pop(L, 1);
    }
    /* pass 2: gather pointers; the strings stay alive in the tables */
    const char **names = calloc(n + 1, sizeof *names);
    const char **mk = calloc(nm + 1, sizeof *mk), **mv = calloc(nm + 1, sizeof *mv);
    const kh_tensor **ts = calloc(n + 1, sizeof *ts);
    if (!names || !mk || !mv || !ts) {
        free(names);
        free(mk);
        free(mv);
        free(ts);
        return luaL_error(L, "out of memory");
    }
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        names[i++] = lua_tostring(L, -2);
        lua_pop(L, 1);
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (i = 0; i < n; i++) {
        lua_getfield(L, 2, names[i]);
        ts[i] = ((l_tensor *)lua_touserdata(L, -1))->t;
        lua_pop(L, 1);
    }
    i = 0;
    if (nm) {
        lua_pushnil(L);
        while (lua_next(L, meta)) {
            mk[i] = lua_tostring(L, -2);
            mv[i++] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
    }
    kh_err err;
    kh_status st = kh_st_write(path, n, names, ts, nm, mk, mv, &err);
    free(names);
    free(mk);
    free(mv);
    free(ts);
    if (st)
        return kh_lua_fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- methods ------------------------------------------------------------- */

static uint64_t check_index(lua_State *L, kh_tensor *x, int idx)
{
    lua_Integer i = luaL_checkinteger(L, idx);
    if (i < 1 || (uint64_t)i > x->numel)
        luaL_argerror(L, idx, lua_pushfstring(L, "index %I out of range [1, %I]", (lua_Integer)i,
                                              (lua_Integer)x->numel));
    return (uint64_t)i - 1;
}

static void push_elem(lua_State *L, const kh_tensor *x, uint64_t i)
{
    uint64_t c = kh_dtype_get_code(x->dtype, x->data, i);
    if (x->dtype == KH_DTYPE_BOOL) {
        lua_pushboolean(L, c != 0);
    } else if (kh_dtype_is_int(x->dtype)) {
        /* sign-extend the code: exact even for int64 beyond 2^53 */
        int bits = kh_dtype_bits(x->dtype);
        if (bits < 64 && (c >> (bits - 1)) & 1u)
            c |= ~0ull << bits;
        lua_pushinteger(L, (lua_Integer)c);
    } else {
        lua_pushnumber(L, kh_dtype_decode(x->dtype, c));
    }
}

static int m_get(lua_State *L)
{
    kh_tensor *x = kh_lua_check_tensor(L, 1);
    push_elem(L, x, check_index(L, x, 2));
    return 1;
}

static int m_set(lua_State *L)
{
    kh_tensor *x = kh_lua_check_tensor(L, 1);
    uint64_t i = check_index(L, x, 2);
    if (!(lua_type(L, 3) == LUA_TNUMBER ||
          (x->dtype == KH_DTYPE_BOOL && lua_type(L, 3) == LUA_TBOOLEAN)))
        return luaL_argerror(L, 3, "expected a number");
    set_from_lua(L, x, i, 3);
    return 0;
}

/* t:seed() -> seed, stream, "random" | "dsa_kcache" for a generated tensor
 * (an element that is later set keeps them: they say how it was made), or
 * nil for one made otherwise. */
static int m_seed(lua_State *L)
{
    kh_lua_check_tensor(L, 1);
    l_tensor *u = check_ud(L, 1);
    if (!u->seeded) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushinteger(L, (lua_Integer)u->seed);
    lua_pushinteger(L, (lua_Integer)u->stream);
    lua_pushstring(L, u->how);
    return 3;
}

/* t:code(i) -> the element's bit pattern (zero-extended integer). */
static int m_code(lua_State *L)
{
    kh_tensor *x = kh_lua_check_tensor(L, 1);
    lua_pushinteger(L, (lua_Integer)kh_dtype_get_code(x->dtype, x->data, check_index(L, x, 2)));
    return 1;
}

static int m_totable(lua_State *L)
{
    kh_tensor *x = kh_lua_check_tensor(L, 1);
    luaL_argcheck(L, x->numel <= (1u << 26), 1, "tensor too large for a Lua table (> 2^26)");
    lua_createtable(L, (int)x->numel, 0);
    for (uint64_t i = 0; i < x->numel; i++) {
        push_elem(L, x, i);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int m_dtype(lua_State *L)
{
    lua_pushstring(L, kh_dtype_name(kh_lua_check_tensor(L, 1)->dtype));
    return 1;
}

static int m_shape(lua_State *L)
{
    kh_tensor *x = kh_lua_check_tensor(L, 1);
    lua_createtable(L, x->ndim, 0);
    for (int i = 0; i < x->ndim; i++) {
        lua_pushinteger(L, (lua_Integer)x->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int m_numel(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)kh_lua_check_tensor(L, 1)->numel);
    return 1;
}

static int m_nbytes(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)kh_lua_check_tensor(L, 1)->nbytes);
    return 1;
}

/* t:bytes() -> the raw little-endian bytes as a string. */
static int m_bytes(lua_State *L)
{
    kh_tensor *x = kh_lua_check_tensor(L, 1);
    lua_pushlstring(L, x->data, x->nbytes);
    return 1;
}

static int m_tostring(lua_State *L)
{
    l_tensor *u = check_ud(L, 1);
    if (!u->t) {
        lua_pushliteral(L, "kh.Tensor (closed)");
        return 1;
    }
    char s[300];
    lua_pushfstring(L, "kh.Tensor(%s, %s)", kh_dtype_name(u->t->dtype),
                    kh_tensor_shape_str(u->t->ndim, u->t->shape, s, sizeof s));
    return 1;
}

void kh_open_tensor(lua_State *L, kh_engine *e)
{
    static const luaL_Reg methods[] = {
        {"get", m_get},       {"set", m_set},     {"code", m_code},   {"totable", m_totable},
        {"dtype", m_dtype},   {"shape", m_shape}, {"numel", m_numel}, {"nbytes", m_nbytes},
        {"bytes", m_bytes},   {"seed", m_seed},   {"close", t_close}, {NULL, NULL},
    };
    if (luaL_newmetatable(L, TENSOR_MT)) {
        /* [mt] */
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, t_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, t_close);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, m_tostring);
        lua_setfield(L, -2, "__tostring");
        lua_pushcfunction(L, m_numel);
        lua_setfield(L, -2, "__len");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"new", l_new},       {"random", l_random}, {"dsa_kcache", l_dsa_kcache},
        {"dtype", l_dtype},   {"dtypes", l_dtypes},
        {"encode", l_encode}, {"decode", l_decode}, {"load", l_load},   {"save", l_save},
        {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
}
