from bildlib.bench.gpu.check import main

main()
