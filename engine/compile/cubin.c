/* cubin.c: an ELF64 reader for CUDA cubins (see cubin.h for what is read
 * where).  Owns only parsing: every offset and size from the file is checked
 * against the buffer before use, because cubins come from compilers we run on
 * hostile source and from the store, which may be corrupt.  It does not load
 * or validate code; the GPU worker does that. */
#include "compile/cubin.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

#define EM_CUDA_ 190
#define STO_CUDA_ENTRY 0x10
#define CUDA_RESERVED_SMEM 1024 /* sm_90+ system reserve inside .nv.shared.<k> */

enum { /* EIATTR codes (format byte, attribute byte, payload) */
    EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4,
    EIATTR_MAX_THREADS = 0x05, EIATTR_REQNTID = 0x10, EIATTR_FRAME_SIZE = 0x11,
    EIATTR_MIN_STACK_SIZE = 0x12, EIATTR_MAXREG_COUNT = 0x1b, EIATTR_REGCOUNT = 0x2f,
    EIATTR_NUM_BARRIERS = 0x4c, EIATTR_SPILL_INSTRS = 0x55,
};

typedef struct reader {
    const unsigned char *p;
    size_t len;
    Elf64_Shdr *sh; /* copied section headers */
    size_t nsh;
    const char *shstr;
    size_t shstr_len;
} reader;

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static const char *sec_name(const reader *r, const Elf64_Shdr *s)
{
    if (s->sh_name >= r->shstr_len)
        return "";
    const char *n = r->shstr + s->sh_name;
    if (!memchr(n, '\0', r->shstr_len - s->sh_name))
        return "";
    return n;
}

/* Bytes of a section that has file contents, or NULL if out of bounds. */
static const unsigned char *sec_data(const reader *r, const Elf64_Shdr *s)
{
    if (s->sh_type == SHT_NOBITS)
        return NULL;
    if (s->sh_offset > r->len || s->sh_size > r->len - s->sh_offset)
        return NULL;
    return r->p + s->sh_offset;
}

static kh_kernel_res *find_by_sym(kh_cubin_info *info, const uint32_t *symidx, uint32_t sym)
{
    for (size_t i = 0; i < info->n_kernels; i++)
        if (symidx[i] == sym)
            return &info->kernels[i];
    return NULL;
}

static kh_kernel_res *find_mut(kh_cubin_info *info, const char *name)
{
    return (kh_kernel_res *)kh_cubin_find(info, name);
}

/* Walk one .nv.info section; k is NULL for the global section (whose
 * attributes name their kernel by symbol index). */
static kh_status walk_info(const unsigned char *d, size_t n, kh_cubin_info *info,
                           const uint32_t *symidx, kh_kernel_res *k, kh_err *err)
{
    size_t off = 0;
    while (off + 2 <= n) {
        unsigned fmt = d[off], attr = d[off + 1];
        const unsigned char *pay = d + off + 2;
        size_t plen = 0;
        if (fmt == EIFMT_NVAL || fmt == EIFMT_BVAL || fmt == EIFMT_HVAL) {
            if (off + 4 > n)
                return kh_err_set(err, KH_EPARSE, "cubin: truncated .nv.info attribute");
            plen = 2;
        } else if (fmt == EIFMT_SVAL) {
            if (off + 4 > n)
                return kh_err_set(err, KH_EPARSE, "cubin: truncated .nv.info attribute");
            plen = (size_t)pay[0] | ((size_t)pay[1] << 8);
            pay += 2;
            if (off + 4 + plen > n)
                return kh_err_set(err, KH_EPARSE,
                                  "cubin: .nv.info attribute 0x%02x overruns its section", attr);
        } else {
            return kh_err_set(err, KH_EPARSE, "cubin: unknown .nv.info format 0x%02x", fmt);
        }
        if (!k && fmt == EIFMT_SVAL && plen >= 8) {
            kh_kernel_res *kk = find_by_sym(info, symidx, rd32(pay));
            uint32_t v = rd32(pay + 4);
            if (kk) {
                if (attr == EIATTR_REGCOUNT)
                    kk->registers = (int)v;
                else if (attr == EIATTR_FRAME_SIZE)
                    kk->local_bytes = v;
                else if (attr == EIATTR_MIN_STACK_SIZE)
                    kk->min_stack = v;
            }
        } else if (k) {
            if (attr == EIATTR_MAX_THREADS && fmt == EIFMT_SVAL && plen >= 12)
                k->max_threads = (int)(rd32(pay) * rd32(pay + 4) * rd32(pay + 8));
            else if (attr == EIATTR_REQNTID && fmt == EIFMT_SVAL && plen >= 12)
                for (int i = 0; i < 3; i++)
                    k->reqntid[i] = (int)rd32(pay + 4 * i);
            else if (attr == EIATTR_MAXREG_COUNT && fmt == EIFMT_HVAL)
                k->maxreg = pay[0] == 0xff && pay[1] == 0 ? 0 : pay[0] | (pay[1] << 8);
            else if (attr == EIATTR_NUM_BARRIERS && fmt != EIFMT_SVAL)
                k->barriers = pay[0];
            else if (attr == EIATTR_SPILL_INSTRS && fmt == EIFMT_SVAL)
                k->spill_instructions = (int)(plen / 8);
        }
        off += (fmt == EIFMT_SVAL ? 4 + plen : 4);
    }
    return KH_OK;
}

kh_status kh_cubin_parse(const void *data, size_t len, kh_cubin_info *out, kh_err *err)
{
    memset(out, 0, sizeof *out);
    reader r = {.p = data, .len = len};
    Elf64_Ehdr eh;
    if (!data || len < sizeof eh)
        return kh_err_set(err, KH_EPARSE, "cubin: %zu bytes is too short for an ELF header",
                          len);
    memcpy(&eh, data, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64)
        return kh_err_set(err, KH_EPARSE, "cubin: not an ELF64 image");
    if (eh.e_ident[EI_DATA] != ELFDATA2LSB)
        return kh_err_set(err, KH_EPARSE, "cubin: not little-endian");
    if (eh.e_machine != EM_CUDA_)
        return kh_err_set(err, KH_EPARSE, "cubin: ELF machine %u is not CUDA (190)",
                          eh.e_machine);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
        eh.e_shoff > len || (size_t)eh.e_shnum * sizeof(Elf64_Shdr) > len - eh.e_shoff ||
        eh.e_shstrndx >= eh.e_shnum)
        return kh_err_set(err, KH_EPARSE, "cubin: section header table out of bounds");
    /* ABI v8 keeps the SM number in bits 8..15 of e_flags (0x5a = 90 for sm_90a);
     * older images keep it in bits 0..7. */
    out->sm = eh.e_ident[EI_ABIVERSION] >= 7 ? (int)((eh.e_flags >> 8) & 0xff)
                                             : (int)(eh.e_flags & 0xff);
    r.nsh = eh.e_shnum;
    r.sh = malloc(r.nsh * sizeof *r.sh);
    if (!r.sh)
        return kh_err_set(err, KH_ENOMEM, "cubin: out of memory");
    memcpy(r.sh, r.p + eh.e_shoff, r.nsh * sizeof *r.sh);
    kh_status st = KH_OK;
    uint32_t *symidx = NULL;
    const unsigned char *ss = sec_data(&r, &r.sh[eh.e_shstrndx]);
    if (!ss) {
        st = kh_err_set(err, KH_EPARSE, "cubin: section name table out of bounds");
        goto done;
    }
    r.shstr = (const char *)ss;
    r.shstr_len = r.sh[eh.e_shstrndx].sh_size;

    /* 1. kernels: entry-point function symbols */
    const Elf64_Shdr *symtab = NULL;
    for (size_t i = 0; i < r.nsh; i++)
        if (r.sh[i].sh_type == SHT_SYMTAB)
            symtab = &r.sh[i];
    if (!symtab) {
        st = kh_err_set(err, KH_EPARSE, "cubin: no symbol table");
        goto done;
    }
    const unsigned char *sd = sec_data(&r, symtab);
    if (!sd || symtab->sh_link >= r.nsh || symtab->sh_entsize != sizeof(Elf64_Sym)) {
        st = kh_err_set(err, KH_EPARSE, "cubin: symbol table out of bounds");
        goto done;
    }
    const Elf64_Shdr *strsec = &r.sh[symtab->sh_link];
    const char *strtab = (const char *)sec_data(&r, strsec);
    if (!strtab) {
        st = kh_err_set(err, KH_EPARSE, "cubin: string table out of bounds");
        goto done;
    }
    size_t nsym = symtab->sh_size / sizeof(Elf64_Sym);
    out->kernels = calloc(nsym ? nsym : 1, sizeof *out->kernels);
    symidx = calloc(nsym ? nsym : 1, sizeof *symidx);
    if (!out->kernels || !symidx) {
        st = kh_err_set(err, KH_ENOMEM, "cubin: out of memory");
        goto done;
    }
    for (size_t i = 0; i < nsym; i++) {
        Elf64_Sym sym;
        memcpy(&sym, sd + i * sizeof sym, sizeof sym);
        if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || !(sym.st_other & STO_CUDA_ENTRY))
            continue;
        if (sym.st_name >= strsec->sh_size ||
            !memchr(strtab + sym.st_name, '\0', strsec->sh_size - sym.st_name)) {
            st = kh_err_set(err, KH_EPARSE, "cubin: symbol name out of bounds");
            goto done;
        }
        kh_kernel_res *k = &out->kernels[out->n_kernels];
        k->name = kh_strdup(strtab + sym.st_name);
        if (!k->name) {
            st = kh_err_set(err, KH_ENOMEM, "cubin: out of memory");
            goto done;
        }
        k->registers = -1;
        symidx[out->n_kernels++] = (uint32_t)i;
    }

    /* 2. the reserved shared region, if this image has one */
    for (size_t i = 0; i < r.nsh; i++)
        if (!strcmp(sec_name(&r, &r.sh[i]), ".nv.shared.reserved.0") && out->sm >= 90)
            out->reserved_smem = CUDA_RESERVED_SMEM;

    /* 3. per-section attributes */
    for (size_t i = 0; i < r.nsh && st == KH_OK; i++) {
        const Elf64_Shdr *s = &r.sh[i];
        const char *name = sec_name(&r, s);
        if (!strcmp(name, ".nv.info")) {
            const unsigned char *d = sec_data(&r, s);
            if (!d)
                st = kh_err_set(err, KH_EPARSE, "cubin: .nv.info out of bounds");
            else
                st = walk_info(d, s->sh_size, out, symidx, NULL, err);
        } else if (!strncmp(name, ".nv.info.", 9)) {
            kh_kernel_res *k = find_mut(out, name + 9);
            const unsigned char *d = sec_data(&r, s);
            if (!d)
                st = kh_err_set(err, KH_EPARSE, "cubin: %s out of bounds", name);
            else if (k)
                st = walk_info(d, s->sh_size, out, symidx, k, err);
        } else if (!strncmp(name, ".nv.shared.", 11)) {
            kh_kernel_res *k = find_mut(out, name + 11);
            if (k) {
                long sz = (long)s->sh_size;
                k->shared_static = sz >= out->reserved_smem ? sz - out->reserved_smem : sz;
            }
        } else if (!strncmp(name, ".nv.constant0.", 14)) {
            kh_kernel_res *k = find_mut(out, name + 14);
            if (k)
                k->param_bytes = (long)s->sh_size;
        } else if (!strncmp(name, ".text.", 6)) {
            kh_kernel_res *k = find_mut(out, name + 6);
            if (k)
                k->code_bytes = (long)s->sh_size;
        }
    }
    /* 4. the block size the registers allow (sm_50 and later: 64 Ki
     * registers per block, 1024 threads, per-warp allocation unit 256) */
    for (size_t i = 0; st == KH_OK && i < out->n_kernels; i++) {
        kh_kernel_res *k = &out->kernels[i];
        if (k->registers <= 0 || out->sm < 50)
            continue;
        long per_warp = ((long)k->registers * 32 + 255) / 256 * 256;
        long mt = 65536 / per_warp * 32;
        if (mt > 1024)
            mt = 1024;
        if (k->max_threads > 0 && k->max_threads < mt)
            mt = k->max_threads;
        int req = k->reqntid[0] * (k->reqntid[1] ? k->reqntid[1] : 1) *
                  (k->reqntid[2] ? k->reqntid[2] : 1);
        if (req > 0 && req < mt)
            mt = req;
        k->max_threads_per_block = (int)mt;
    }
done:
    free(r.sh);
    free(symidx);
    if (st != KH_OK)
        kh_cubin_info_free(out);
    return st;
}

void kh_cubin_info_free(kh_cubin_info *info)
{
    if (!info)
        return;
    for (size_t i = 0; i < info->n_kernels; i++)
        free(info->kernels[i].name);
    free(info->kernels);
    memset(info, 0, sizeof *info);
}

const kh_kernel_res *kh_cubin_find(const kh_cubin_info *info, const char *name)
{
    for (size_t i = 0; info && i < info->n_kernels; i++)
        if (!strcmp(info->kernels[i].name, name))
            return &info->kernels[i];
    return NULL;
}
