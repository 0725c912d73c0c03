package buffer

import (
	"fmt"
	"math"

	"softnet.dev/internal/knob"
)

// Defaults used where a Config field is zero.
const (
	DefaultHeadroom  = 128 // room before the data for encapsulation headers
	DefaultCacheSize = 128 // entries per class in a Cache, as the kernel's NAPI cache
	DefaultDeferMax  = 128 // the kernel's skb_defer_max
	DefaultMaxCaches = 64

	maxClasses = 8
	frameAlign = 64 // frames start on cache lines
)

// ClassConfig describes one size class: frames with Room bytes of data
// space after the pool's headroom, and Count of them.
type ClassConfig struct {
	Room  int
	Count int
}

// Config fixes a pool's capacity and behaviour. The zero value is usable:
// see DefaultClasses.
type Config struct {
	// Classes lists the size classes in increasing Room order; the index
	// in this slice is the Class. Empty means DefaultClasses.
	Classes []ClassConfig
	// Headroom is the space reserved before the data of a fresh buffer,
	// at least DefaultHeadroom.
	Headroom int
	// CacheSize is the number of entries per class in each Cache; it must
	// be even. Misses refill and overflows flush CacheSize/2 at a time.
	CacheSize int
	// DeferMax bounds a cache's inbound remote-free list.
	DeferMax int
	// MaxCaches bounds the number of caches (workers) of the pool.
	MaxCaches int
	// Debug records where each buffer was taken and freed, reports
	// double frees with both sites, and poisons freed frames so that a
	// write after free is reported at the next Get. It is slow.
	Debug bool
	// Knobs turn mechanisms off for softnet's own lab and benchmarks,
	// which measure what each is worth. Only softnet's packages can make
	// a value other than the zero one: the pool described here.
	Knobs knob.Pool
}

// Class indices of DefaultClasses.
const (
	ClassMTU Class = 0 // 2 KiB of room: any frame up to a 1500-byte MTU plus headers
	ClassGSO Class = 1 // 64 KiB of room: a whole GSO/GRO super-packet
)

// DefaultClasses returns the classes used when Config.Classes is empty:
// 4096 MTU frames and 128 GSO frames, about 17 MiB in all.
func DefaultClasses() []ClassConfig {
	return []ClassConfig{{Room: 2048, Count: 4096}, {Room: 65536, Count: 128}}
}

func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Classes) == 0 {
		cfg.Classes = DefaultClasses()
	}
	if cfg.Headroom == 0 {
		cfg.Headroom = DefaultHeadroom
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.DeferMax == 0 {
		cfg.DeferMax = DefaultDeferMax
	}
	if cfg.MaxCaches == 0 {
		cfg.MaxCaches = DefaultMaxCaches
	}
	switch {
	case len(cfg.Classes) > maxClasses:
		return cfg, fmt.Errorf("buffer: %d size classes, at most %d", len(cfg.Classes), maxClasses)
	case cfg.Headroom < DefaultHeadroom || cfg.Headroom > 4096:
		return cfg, fmt.Errorf("buffer: headroom %d outside [%d, 4096]", cfg.Headroom, DefaultHeadroom)
	case cfg.CacheSize < 2 || cfg.CacheSize%2 != 0 || cfg.CacheSize > 4096:
		return cfg, fmt.Errorf("buffer: cache size %d must be even and in [2, 4096]", cfg.CacheSize)
	case cfg.DeferMax < 2 || cfg.DeferMax > 1<<20:
		return cfg, fmt.Errorf("buffer: defer max %d outside [2, %d]", cfg.DeferMax, 1<<20)
	case cfg.MaxCaches < 1 || cfg.MaxCaches >= free:
		return cfg, fmt.Errorf("buffer: max caches %d outside [1, %d]", cfg.MaxCaches, free-1)
	}
	total := 0
	for i, c := range cfg.Classes {
		if c.Room < 64 || c.Room > 1<<20 {
			return cfg, fmt.Errorf("buffer: class %d: room %d outside [64, %d]", i, c.Room, 1<<20)
		}
		if c.Count < 1 {
			return cfg, fmt.Errorf("buffer: class %d: count %d, need at least 1", i, c.Count)
		}
		if i > 0 && c.Room <= cfg.Classes[i-1].Room {
			return cfg, fmt.Errorf("buffer: class %d: room %d not larger than class %d's %d", i, c.Room, i-1, cfg.Classes[i-1].Room)
		}
		if int64(c.Count)*int64(frameSize(cfg.Headroom, c.Room)) > 1<<40 {
			return cfg, fmt.Errorf("buffer: class %d: %d frames of %d bytes exceed 1 TiB", i, c.Count, c.Room)
		}
		total += c.Count
		if total >= math.MaxUint32 {
			return cfg, fmt.Errorf("buffer: more than %d buffers", math.MaxUint32-1)
		}
	}
	return cfg, nil
}

func frameSize(headroom, room int) int {
	return (headroom + room + frameAlign - 1) &^ (frameAlign - 1)
}
