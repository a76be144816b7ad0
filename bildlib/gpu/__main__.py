from bildlib.gpu.check import main

main()
