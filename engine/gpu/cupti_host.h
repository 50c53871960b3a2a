/* cupti_host.h: the parts of CUPTI 13's Profiler Host API that rprof.c uses.
 * The toolkit's cupti_profiler_host.h includes C++'s <string>, so a C file
 * cannot include it; these declarations restate its structures field for
 * field (CUDA 13.0, CUPTI_API_VERSION 130001).  tests/c/cupti_host_layout.cpp
 * checks them against the real header with a C++ compiler:
 *   g++ -std=c++17 -fsyntax-only -I engine -I /usr/local/cuda/include \
 *       tests/c/cupti_host_layout.cpp */
#ifndef KH_CUPTI_HOST_H
#define KH_CUPTI_HOST_H

#include <cupti_result.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { KH_CUPTI_PROFILER_TYPE_RANGE_PROFILER = 0 } kh_cupti_profiler_type;
#ifndef _CUPTI_PROFILER_HOST_H_
typedef struct CUpti_Profiler_Host_Object CUpti_Profiler_Host_Object;
#endif
#define KH_SZ(type_, last_) (offsetof(type_, last_) + sizeof(((type_ *)0)->last_))

typedef struct kh_host_init {
    size_t structSize;
    void *pPriv;
    int profilerType; /* CUpti_ProfilerType, an enum */
    const char *pChipName;
    const uint8_t *pCounterAvailabilityImage;
    CUpti_Profiler_Host_Object *pHostObject;
} kh_host_init;
typedef struct kh_host_deinit {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
} kh_host_deinit;
typedef struct kh_host_metric_props {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const char *pMetricName;
    const char *pDescription;
    const char *pHwUnit;
    const char *pDimUnit;
    int metricType; /* CUpti_MetricType */
} kh_host_metric_props;
typedef struct kh_host_range_name {
    size_t structSize;
    void *pPriv;
    const uint8_t *pCounterDataImage;
    size_t counterDataImageSize;
    size_t rangeIndex;
    const char *delimiter;
    const char *pRangeName;
} kh_host_range_name;
typedef struct kh_host_evaluate {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const uint8_t *pCounterDataImage;
    size_t counterDataImageSize;
    size_t rangeIndex;
    const char **ppMetricNames;
    size_t numMetrics;
    double *pMetricValues;
} kh_host_evaluate;
typedef struct kh_host_add_metrics {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const char **ppMetricNames;
    size_t numMetrics;
} kh_host_add_metrics;
typedef struct kh_host_config_size {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    size_t configImageSize;
} kh_host_config_size;
typedef struct kh_host_config_image {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    size_t configImageSize;
    uint8_t *pConfigImage;
} kh_host_config_image;
typedef struct kh_host_num_passes {
    size_t structSize;
    void *pPriv;
    size_t configImageSize;
    uint8_t *pConfigImage;
    size_t numOfPasses;
} kh_host_num_passes;

#ifndef _CUPTI_PROFILER_HOST_H_ /* the C++ check includes both */
CUptiResult cuptiProfilerHostInitialize(kh_host_init *);
CUptiResult cuptiProfilerHostDeinitialize(kh_host_deinit *);
CUptiResult cuptiProfilerHostGetMetricProperties(kh_host_metric_props *);
CUptiResult cuptiProfilerHostGetRangeName(kh_host_range_name *);
CUptiResult cuptiProfilerHostEvaluateToGpuValues(kh_host_evaluate *);
CUptiResult cuptiProfilerHostConfigAddMetrics(kh_host_add_metrics *);
CUptiResult cuptiProfilerHostGetConfigImageSize(kh_host_config_size *);
CUptiResult cuptiProfilerHostGetConfigImage(kh_host_config_image *);
CUptiResult cuptiProfilerHostGetNumOfPasses(kh_host_num_passes *);
#endif

#endif
