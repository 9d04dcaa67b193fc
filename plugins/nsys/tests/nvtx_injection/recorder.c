/*
 * recorder.c -- a minimal NVTX v3 tool ("injection library") for rlprof-nsys tests.
 *
 * Why: the nsys backend's ranges are only worth something if a real NVTX tool sees them with the
 * right names, domain and nesting. Nsight Systems needs a GPU machine; this library needs
 * nothing but gcc, and attaches to NVTX through the very same mechanism nsys uses:
 *
 *   NVTX_INJECTION64_PATH=/path/librecorder.so   the library NVTX loads at its first call
 *   RLPROF_NVTX_RECORD=/path/events.jsonl        where this library writes what it saw
 *
 * NVTX calls InitializeInjectionNvtx2(getExportTable); we fill the CORE and CORE2 callback
 * tables and write one JSON object per NVTX call (append-only, one write(2) per line, so threads
 * and processes sharing a file do not interleave lines):
 *
 *   {"ev":"start","api":"DomainRangeStartEx","domain":"rlprof","msg":"step3","depth":0,
 *    "id":7,"color":4286019447,"category":1,"pid":4242,"tid":4242,"t":123456789}
 *
 * payload: an integer or floating-point payload, when the event carries one.
 *
 * depth: for push/pop the per-thread nesting in that domain before the push (0 = outermost);
 * for start/end the number of ranges of that domain open in the process when the range began.
 * For "init", id is the NVTX API version of the application. Fields that do not apply are omitted. Built by a session-scoped pytest fixture; never installed.
 */
#define _GNU_SOURCE
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h> /* with NVTX_NO_IMPL: the API types and the tool-side callback types */

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#define TEXT_MAX 256
#define STACK_MAX 256
#define OPEN_MAX 4096

struct nvtxDomainRegistration_st { char name[TEXT_MAX]; };
struct nvtxStringRegistration_st { char text[TEXT_MAX]; };

static struct nvtxDomainRegistration_st default_domain = { "NVTX" };
static int out_fd = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* push/pop: a per-thread stack of (domain, message). */
typedef struct { const void *domain; char msg[TEXT_MAX]; } pushed_t;
static __thread pushed_t pushed[STACK_MAX];
static __thread int pushed_n = 0;

/* start/end: process-wide table of open ranges. */
typedef struct { nvtxRangeId_t id; const void *domain; int depth; char msg[TEXT_MAX]; } open_t;
static open_t opened[OPEN_MAX];
static int opened_n = 0;
static nvtxRangeId_t next_id = 1;

static const char *domain_name(nvtxDomainHandle_t d) { return d ? d->name : default_domain.name; }

static void copy_text(char *dst, const char *src) { snprintf(dst, TEXT_MAX, "%s", src ? src : ""); }

static void message_of(const nvtxEventAttributes_t *a, char *out)
{
    out[0] = '\0';
    if (!a) return;
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: copy_text(out, a->message.ascii); break;
    case NVTX_MESSAGE_TYPE_REGISTERED:
        if (a->message.registered) copy_text(out, a->message.registered->text);
        break;
    case NVTX_MESSAGE_TYPE_UNICODE:
        if (a->message.unicode) snprintf(out, TEXT_MAX, "%ls", a->message.unicode);
        break;
    default: break;
    }
}

/* Append s to buf as a JSON string literal. */
static size_t json_str(char *buf, size_t at, size_t cap, const char *s)
{
    if (at < cap) buf[at++] = '"';
    for (; *s && at + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { buf[at++] = '\\'; buf[at++] = (char)c; }
        else if (c < 0x20) at += (size_t)snprintf(buf + at, cap - at, "\\u%04x", c);
        else buf[at++] = (char)c;
    }
    if (at < cap) buf[at++] = '"';
    return at;
}

/* One event line. Optional fields: msg (NULL = omit), the ints (< 0 = omit), attributes. */
static void emit(const char *ev, const char *api, const char *domain, const char *msg,
                 long long depth, long long id, const nvtxEventAttributes_t *attr)
{
    char line[2048];
    size_t n = 0, cap = sizeof line - 2;
    struct timespec ts;
    if (out_fd < 0) return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    n += (size_t)snprintf(line + n, cap - n, "{\"ev\":\"%s\",\"api\":\"%s\",\"domain\":", ev, api);
    n = json_str(line, n, cap, domain ? domain : "");
    if (msg) { n += (size_t)snprintf(line + n, cap - n, ",\"msg\":"); n = json_str(line, n, cap, msg); }
    if (depth >= 0) n += (size_t)snprintf(line + n, cap - n, ",\"depth\":%lld", depth);
    if (id >= 0) n += (size_t)snprintf(line + n, cap - n, ",\"id\":%lld", id);
    if (attr) {
        if (attr->colorType == NVTX_COLOR_ARGB) n += (size_t)snprintf(line + n, cap - n, ",\"color\":%u", attr->color);
        n += (size_t)snprintf(line + n, cap - n, ",\"category\":%u", attr->category);
        switch (attr->payloadType) {
        case NVTX_PAYLOAD_TYPE_INT64: n += (size_t)snprintf(line + n, cap - n, ",\"payload\":%lld", (long long)attr->payload.llValue); break;
        case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64: n += (size_t)snprintf(line + n, cap - n, ",\"payload\":%llu", (unsigned long long)attr->payload.ullValue); break;
        case NVTX_PAYLOAD_TYPE_INT32: n += (size_t)snprintf(line + n, cap - n, ",\"payload\":%d", attr->payload.iValue); break;
        case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32: n += (size_t)snprintf(line + n, cap - n, ",\"payload\":%u", attr->payload.uiValue); break;
        case NVTX_PAYLOAD_TYPE_DOUBLE: n += (size_t)snprintf(line + n, cap - n, ",\"payload\":%.17g", attr->payload.dValue); break;
        default: break;
        }
    }
    n += (size_t)snprintf(line + n, cap - n, ",\"pid\":%d,\"tid\":%ld,\"t\":%lld}\n",
                          (int)getpid(), (long)syscall(SYS_gettid),
                          (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (write(out_fd, line, n) < 0) { /* nothing sensible to do in a test tool */ }
}

/* ---- CORE2: domain API (what the python nvtx package calls) ---- */

static nvtxDomainHandle_t domain_create_a(const char *name)
{
    nvtxDomainHandle_t d = calloc(1, sizeof *d);
    copy_text(d->name, name);
    emit("domain_create", "DomainCreateA", d->name, NULL, -1, -1, NULL);
    return d;
}

static void domain_destroy(nvtxDomainHandle_t d)
{
    emit("domain_destroy", "DomainDestroy", domain_name(d), NULL, -1, -1, NULL);
    /* handles may still be referenced by cached attributes: never freed (test-only tool) */
}

static nvtxStringHandle_t register_string_a(nvtxDomainHandle_t d, const char *text)
{
    nvtxStringHandle_t s = calloc(1, sizeof *s);
    copy_text(s->text, text);
    emit("register_string", "DomainRegisterStringA", domain_name(d), s->text, -1, -1, NULL);
    return s;
}

static void name_category_a(nvtxDomainHandle_t d, uint32_t category, const char *name)
{
    emit("name_category", "DomainNameCategoryA", domain_name(d), name, -1, (long long)category, NULL);
}

static void domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char msg[TEXT_MAX];
    message_of(a, msg);
    emit("mark", "DomainMarkEx", domain_name(d), msg, -1, -1, a);
}

static int push_common(const char *api, nvtxDomainHandle_t d, const char *msg, const nvtxEventAttributes_t *a)
{
    int depth = 0, i;
    for (i = 0; i < pushed_n; i++) if (pushed[i].domain == (const void *)d) depth++;
    if (pushed_n < STACK_MAX) { pushed[pushed_n].domain = d; copy_text(pushed[pushed_n].msg, msg); pushed_n++; }
    emit("push", api, domain_name(d), msg, depth, -1, a);
    return depth;
}

static int pop_common(const char *api, nvtxDomainHandle_t d)
{
    int i, depth = 0;
    for (i = pushed_n - 1; i >= 0; i--) {
        if (pushed[i].domain == (const void *)d) {
            int j;
            for (j = 0; j < i; j++) if (pushed[j].domain == (const void *)d) depth++;
            emit("pop", api, domain_name(d), pushed[i].msg, depth, -1, NULL);
            memmove(&pushed[i], &pushed[i + 1], (size_t)(pushed_n - i - 1) * sizeof pushed[0]);
            pushed_n--;
            return depth;
        }
    }
    emit("pop", api, domain_name(d), "", -1, -1, NULL); /* unbalanced pop: recorded, no depth */
    return -1;
}

static int domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char msg[TEXT_MAX];
    message_of(a, msg);
    return push_common("DomainRangePushEx", d, msg, a);
}

static int domain_pop(nvtxDomainHandle_t d) { return pop_common("DomainRangePop", d); }

static nvtxRangeId_t start_common(const char *api, nvtxDomainHandle_t d, const char *msg, const nvtxEventAttributes_t *a)
{
    nvtxRangeId_t id;
    int depth = 0, i;
    pthread_mutex_lock(&lock);
    id = next_id++;
    for (i = 0; i < opened_n; i++) if (opened[i].domain == (const void *)d) depth++;
    if (opened_n < OPEN_MAX) {
        opened[opened_n].id = id; opened[opened_n].domain = d; opened[opened_n].depth = depth;
        copy_text(opened[opened_n].msg, msg);
        opened_n++;
    }
    pthread_mutex_unlock(&lock);
    emit("start", api, domain_name(d), msg, depth, (long long)id, a);
    return id;
}

static void end_common(const char *api, nvtxDomainHandle_t d, nvtxRangeId_t id)
{
    int i;
    char msg[TEXT_MAX] = "";
    long long depth = -1;
    const void *dom = d;
    pthread_mutex_lock(&lock);
    for (i = 0; i < opened_n; i++) {
        if (opened[i].id == id) {
            copy_text(msg, opened[i].msg);
            depth = opened[i].depth;
            dom = opened[i].domain;
            memmove(&opened[i], &opened[i + 1], (size_t)(opened_n - i - 1) * sizeof opened[0]);
            opened_n--;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    emit("end", api, domain_name((nvtxDomainHandle_t)dom), msg, depth, (long long)id, NULL);
}

static nvtxRangeId_t domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char msg[TEXT_MAX];
    message_of(a, msg);
    return start_common("DomainRangeStartEx", d, msg, a);
}

static void domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { end_common("DomainRangeEnd", d, id); }

static void initialize(const void *reserved) { (void)reserved; }

/* ---- CORE: the default-domain API (nvtxRangePushA etc.), recorded under domain "NVTX" ---- */

static void mark_ex(const nvtxEventAttributes_t *a) { domain_mark_ex(NULL, a); }
static void mark_a(const char *m) { emit("mark", "MarkA", default_domain.name, m, -1, -1, NULL); }
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a)
{
    char msg[TEXT_MAX];
    message_of(a, msg);
    return start_common("RangeStartEx", NULL, msg, a);
}
static nvtxRangeId_t start_a(const char *m) { return start_common("RangeStartA", NULL, m, NULL); }
static void end_(nvtxRangeId_t id) { end_common("RangeEnd", NULL, id); }
static int push_ex(const nvtxEventAttributes_t *a)
{
    char msg[TEXT_MAX];
    message_of(a, msg);
    return push_common("RangePushEx", NULL, msg, a);
}
static int push_a(const char *m) { return push_common("RangePushA", NULL, m, NULL); }
static int pop_(void) { return pop_common("RangePop", NULL); }
static void name_category_core_a(uint32_t category, const char *name) { name_category_a(NULL, category, name); }

static int install(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module,
                   const unsigned int *ids, NvtxFunctionPointer *fns, int count)
{
    NvtxFunctionTable table = 0;
    unsigned int size = 0;
    int i;
    if (!cb->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
    for (i = 0; i < count; i++)
        if (ids[i] < size && table[ids[i]]) *table[ids[i]] = fns[i];
    return 1;
}

#define FN(f) ((NvtxFunctionPointer)(f))

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable)
{
    const NvtxExportTableCallbacks *cb;
    const NvtxExportTableVersionInfo *version;
    const char *path = getenv("RLPROF_NVTX_RECORD");
    static const unsigned int core2_ids[] = {
        NVTX_CBID_CORE2_DomainMarkEx, NVTX_CBID_CORE2_DomainRangeStartEx, NVTX_CBID_CORE2_DomainRangeEnd,
        NVTX_CBID_CORE2_DomainRangePushEx, NVTX_CBID_CORE2_DomainRangePop, NVTX_CBID_CORE2_DomainNameCategoryA,
        NVTX_CBID_CORE2_DomainRegisterStringA, NVTX_CBID_CORE2_DomainCreateA, NVTX_CBID_CORE2_DomainDestroy,
        NVTX_CBID_CORE2_Initialize,
    };
    NvtxFunctionPointer core2_fns[] = {
        FN(domain_mark_ex), FN(domain_start_ex), FN(domain_end), FN(domain_push_ex), FN(domain_pop),
        FN(name_category_a), FN(register_string_a), FN(domain_create_a), FN(domain_destroy), FN(initialize),
    };
    static const unsigned int core_ids[] = {
        NVTX_CBID_CORE_MarkEx, NVTX_CBID_CORE_MarkA, NVTX_CBID_CORE_RangeStartEx, NVTX_CBID_CORE_RangeStartA,
        NVTX_CBID_CORE_RangeEnd, NVTX_CBID_CORE_RangePushEx, NVTX_CBID_CORE_RangePushA, NVTX_CBID_CORE_RangePop,
        NVTX_CBID_CORE_NameCategoryA,
    };
    NvtxFunctionPointer core_fns[] = {
        FN(mark_ex), FN(mark_a), FN(start_ex), FN(start_a), FN(end_), FN(push_ex), FN(push_a), FN(pop_),
        FN(name_category_core_a),
    };

    if (!path || !*path) return 0; /* no record file: decline, NVTX stays a no-op */
    out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) return 0;
    cb = (const NvtxExportTableCallbacks *)getExportTable(NVTX_ETID_CALLBACKS);
    if (!cb) return 0;
    version = (const NvtxExportTableVersionInfo *)getExportTable(NVTX_ETID_VERSIONINFO);
    if (version && version->SetInjectionNvtxVersion) version->SetInjectionNvtxVersion(NVTX_VERSION);
    if (!install(cb, NVTX_CB_MODULE_CORE2, core2_ids, core2_fns, (int)(sizeof core2_ids / sizeof core2_ids[0])))
        return 0;
    install(cb, NVTX_CB_MODULE_CORE, core_ids, core_fns, (int)(sizeof core_ids / sizeof core_ids[0]));
    emit("init", "InitializeInjectionNvtx2", "", NULL, -1, version ? (long long)version->version : -1, NULL);
    return 1;
}
