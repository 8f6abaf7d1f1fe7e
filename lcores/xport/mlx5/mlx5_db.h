/* SPDX-License-Identifier: BSD-3-Clause */
/* Barriers for the mlx5 path (mlx5_*.c and mlx5.h's inline CQ peek): which one each ordering
 * needs. */
#ifndef KVL_LCORES_MLX5_DB_H
#define KVL_LCORES_MLX5_DB_H

/*
 * The three orderings the PRM's posting and polling steps need, named as rdma-core's
 * util/udma_barrier.h names them:
 *  - dma_wmb: CPU stores to host memory (WQEs, a doorbell record) become visible to the NIC
 *    in program order. x86 keeps stores ordered (TSO): a compiler barrier is enough.
 *  - wc_start / wc_flush: around stores to the write-combining UAR page. sfence on x86: the
 *    doorbell record must be globally visible before the doorbell, and the WC buffer must be
 *    flushed out of this core before another doorbell (or another core) can follow it.
 *  - dma_rmb: after seeing a CQE's owner bit, before reading the rest of it. x86 keeps loads
 *    ordered: a compiler barrier.
 *  - dma_mb: reads of CQEs before the store that lets the NIC reuse them (CQ consumer
 *    index). x86 never moves a store before earlier loads: a compiler barrier.
 */
#if defined(__x86_64__) || defined(__i386__)
#define kvl_mlx5_dma_wmb()  __asm__ volatile("" ::: "memory")
#define kvl_mlx5_dma_rmb()  __asm__ volatile("" ::: "memory")
#define kvl_mlx5_dma_mb()   __asm__ volatile("" ::: "memory")
#define kvl_mlx5_wc_start() __asm__ volatile("sfence" ::: "memory")
#define kvl_mlx5_wc_flush() __asm__ volatile("sfence" ::: "memory")
#elif defined(__aarch64__)
#define kvl_mlx5_dma_wmb()  __asm__ volatile("dmb oshst" ::: "memory")
#define kvl_mlx5_dma_rmb()  __asm__ volatile("dmb oshld" ::: "memory")
#define kvl_mlx5_dma_mb()   __asm__ volatile("dmb osh" ::: "memory")
#define kvl_mlx5_wc_start() __asm__ volatile("dsb st" ::: "memory")
#define kvl_mlx5_wc_flush() __asm__ volatile("dsb st" ::: "memory")
#else
#define kvl_mlx5_dma_wmb()  __sync_synchronize()
#define kvl_mlx5_dma_rmb()  __sync_synchronize()
#define kvl_mlx5_dma_mb()   __sync_synchronize()
#define kvl_mlx5_wc_start() __sync_synchronize()
#define kvl_mlx5_wc_flush() __sync_synchronize()
#endif

#endif /* KVL_LCORES_MLX5_DB_H */
