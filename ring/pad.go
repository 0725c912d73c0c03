package ring

// pad separates fields written by different goroutines. It is 128 bytes
// rather than one 64-byte line because x86 adjacent-line prefetch moves lines
// in pairs, which would otherwise still make producer and consumer fight over
// the same pair.
type pad [128]byte
