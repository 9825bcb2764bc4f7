/* Decode one region of a JPEG at a DCT scale of n/8 with libjpeg(-turbo)'s partial decoding:
 * jpeg_crop_scanline (only the iMCU columns the region needs go through the IDCT and colour conversion),
 * jpeg_skip_scanlines (rows above the region are entropy-decoded only) and an early stop (rows below are
 * never read). Built on first use by trainers/data/jpeg_region.py; a plain C function called through ctypes.
 *
 * Returns 0 and fills info = {scaled width, scaled height, x of the first decoded column, decoded width}, or
 * 1 for a file libjpeg can't read (or any warning: the caller then takes the careful path), 2 for a colour
 * space it can't turn into RGB (CMYK/YCCK), 3 when the region or the buffer doesn't fit.
 */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>

struct error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
};

static void on_error(j_common_ptr cinfo) {
    longjmp(((struct error_mgr *)cinfo->err)->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) /* a warning (corrupt data, premature end): not silently decoded as grey */
        longjmp(((struct error_mgr *)cinfo->err)->jump, 1);
}

int decode_region(const unsigned char *data, unsigned long size, int scale_num, int x, int y, int w, int h,
                  unsigned char *out, unsigned long out_size, int *info) {
    struct jpeg_decompress_struct cinfo;
    struct error_mgr err;
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return 1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, size);
    jpeg_read_header(&cinfo, TRUE);
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    if (out == NULL) { /* the header alone */
        info[0] = (int)cinfo.image_width;
        info[1] = (int)cinfo.image_height;
        info[2] = cmyk;
        jpeg_destroy_decompress(&cinfo);
        return 0;
    }
    if (cmyk) {
        jpeg_destroy_decompress(&cinfo);
        return 2;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = (unsigned int)scale_num;
    cinfo.scale_denom = 8;
    jpeg_start_decompress(&cinfo);
    info[0] = (int)cinfo.output_width;
    info[1] = (int)cinfo.output_height;
    if (x < 0 || y < 0 || w < 1 || h < 1 || x + w > (int)cinfo.output_width || y + h > (int)cinfo.output_height) {
        jpeg_destroy_decompress(&cinfo);
        return 3;
    }
    JDIMENSION xoff = (JDIMENSION)x, cw = (JDIMENSION)w;
    if (cw < cinfo.output_width)
        jpeg_crop_scanline(&cinfo, &xoff, &cw); /* widens the region to whole iMCU columns */
    if ((unsigned long)cw * 3 * (unsigned long)h > out_size) {
        jpeg_destroy_decompress(&cinfo);
        return 3;
    }
    if (y > 0)
        jpeg_skip_scanlines(&cinfo, (JDIMENSION)y);
    for (int row = 0; row < h;) {
        JSAMPROW line = out + (unsigned long)row * cw * 3;
        row += (int)jpeg_read_scanlines(&cinfo, &line, 1);
    }
    info[2] = (int)xoff;
    info[3] = (int)cw;
    jpeg_abort_decompress(&cinfo); /* the rows below the region are never decoded */
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

/* The header alone: info = {width, height, 1 for CMYK/YCCK}; 0, or 1 when libjpeg can't read it. */
int header(const unsigned char *data, unsigned long size, int *info) {
    return decode_region(data, size, 8, 0, 0, 0, 0, NULL, 0, info);
}
