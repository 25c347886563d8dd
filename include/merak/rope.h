/*
 * rope.h - rotary position embeddings' frequencies: a base and the scaling
 * a Hugging Face config's rope_scaling names.  Shared by the public API
 * (merak_model_config, merak_op_attention_rope) and the kernels, which
 * compute each frequency from it (kernels/rope.h).
 */
#ifndef MERAK_ROPE_H
#define MERAK_ROPE_H

typedef enum merak_rope_type {
    MERAK_ROPE_DEFAULT = 0, /* inv_freq[j] = 1 / theta^(2j/hd) */
    MERAK_ROPE_LINEAR = 1,  /* every inv_freq divided by factor (position interpolation) */
    MERAK_ROPE_DYNAMIC = 2, /* NTK-aware: theta grown for sequences longer than
                             * original_max_positions, as the library does */
    MERAK_ROPE_LLAMA3 = 3,  /* LLaMA 3.1: long wavelengths divided by factor,
                             * short ones kept, the band between blended */
} merak_rope_type;

typedef struct merak_rope {
    float theta;                /* base; 0: no rotary embeddings */
    merak_rope_type type;
    float factor;               /* LINEAR, DYNAMIC, LLAMA3: at least 1 */
    float low_freq_factor;      /* LLAMA3 */
    float high_freq_factor;     /* LLAMA3: above low_freq_factor */
    int original_max_positions; /* DYNAMIC, LLAMA3: the context the model was trained on */
} merak_rope;

#endif /* MERAK_ROPE_H */
